"""Every deployment query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.deployments.orm import DeploymentEntry


class DeploymentRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, namespace: str, name: str, *, for_update: bool = False) -> DeploymentEntry | None:
        """``for_update``: lock the row until the transaction ends (see ``Repository.get_by_name``)."""
        statement = select(DeploymentEntry).where(
            DeploymentEntry.namespace == namespace, DeploymentEntry.name == name
        )
        if for_update:
            statement = statement.with_for_update().execution_options(populate_existing=True)
        entry: DeploymentEntry | None = (await self.session.execute(statement)).scalar_one_or_none()
        return entry

    def filtered(self, *, namespace: str | None) -> Select[Any]:
        statement = select(DeploymentEntry)
        if namespace:
            statement = statement.where(DeploymentEntry.namespace == namespace)
        return statement

    async def page(
        self, statement: Select[Any], *, limit: int, offset: int
    ) -> tuple[Sequence[DeploymentEntry], int]:
        total = await self.session.scalar(
            select(func.count()).select_from(statement.order_by(None).subquery())
        )
        ordered = (
            statement.order_by(DeploymentEntry.namespace, DeploymentEntry.name).limit(limit).offset(offset)
        )
        rows = (await self.session.execute(ordered)).scalars().all()
        return cast(Sequence[DeploymentEntry], rows), int(total or 0)

    async def all(self, statement: Select[Any] | None = None) -> Sequence[DeploymentEntry]:
        statement = statement if statement is not None else select(DeploymentEntry)
        rows = (
            (await self.session.execute(statement.order_by(DeploymentEntry.namespace, DeploymentEntry.name)))
            .scalars()
            .all()
        )
        return cast(Sequence[DeploymentEntry], rows)

    async def add(self, entry: DeploymentEntry) -> DeploymentEntry:
        self.session.add(entry)
        await self.session.flush()
        return entry

    async def update(self, entry: DeploymentEntry, values: dict[str, Any]) -> DeploymentEntry:
        for key, value in values.items():
            setattr(entry, key, value)
        await self.session.flush()
        return entry

    async def delete(self, entry: DeploymentEntry) -> None:
        await self.session.delete(entry)
        await self.session.flush()
