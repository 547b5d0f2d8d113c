"""Every catalog query lives here; services and routers never build SQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import Select, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.catalog.orm import GpuEntry, ModelEntry
from service.db.base import Base

M = TypeVar("M", bound=Base)


class Repository(Generic[M]):
    model: type[M]

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    def _base(self) -> Select[Any]:
        return select(self.model)

    async def get_by_name(self, name: str, *, for_update: bool = False) -> M | None:
        """``for_update``: ``SELECT … FOR UPDATE`` on PostgreSQL, so of two concurrent writers the second waits
        and then reads the first one's committed version: its ``If-Match`` is checked against what it will
        overwrite (412 when stale), and a write without ``If-Match`` applies on top of it instead of failing.
        SQLite has no row locks; write transactions there start with ``BEGIN IMMEDIATE`` instead
        (``service.db.session``), which serialises them the same way."""
        statement = self._base().where(self.model.name == name)  # type: ignore[attr-defined]
        if for_update:
            statement = statement.with_for_update().execution_options(populate_existing=True)
        result = await self.session.execute(statement)
        return cast(M | None, result.scalar_one_or_none())

    async def page(self, statement: Select[Any], *, limit: int, offset: int) -> tuple[Sequence[M], int]:
        count = await self.session.scalar(
            select(func.count()).select_from(statement.order_by(None).subquery())
        )
        rows = await self.session.execute(statement.order_by(self.model.name).limit(limit).offset(offset))  # type: ignore[attr-defined]
        return cast(Sequence[M], rows.scalars().all()), int(count or 0)

    async def all(self) -> Sequence[M]:
        rows = await self.session.execute(self._base().order_by(self.model.name))  # type: ignore[attr-defined]
        return cast(Sequence[M], rows.scalars().all())

    async def add(self, entry: M) -> M:
        self.session.add(entry)
        await self.session.flush()
        return entry

    async def update(self, entry: M, values: dict[str, Any]) -> M:
        for key, value in values.items():
            setattr(entry, key, value)
        await self.session.flush()
        return entry

    async def delete(self, entry: M) -> None:
        await self.session.delete(entry)
        await self.session.flush()


class GpuRepository(Repository[GpuEntry]):
    model = GpuEntry

    def filtered(self, *, vendor: str | None = None, q: str | None = None) -> Select[Any]:
        statement = self._base()
        if vendor:
            statement = statement.where(GpuEntry.vendor == vendor.lower())
        if q:
            # ``autoescape``: ``%``, ``_`` and the escape character in ``q`` are literal (``LIKE … ESCAPE '/'``).
            needle = q.lower()
            statement = statement.where(
                or_(
                    func.lower(GpuEntry.name).contains(needle, autoescape=True),
                    func.lower(GpuEntry.display_name).contains(needle, autoescape=True),
                )
            )
        return statement


class ModelRepository(Repository[ModelEntry]):
    model = ModelEntry

    def filtered(self, *, family: str | None = None, q: str | None = None) -> Select[Any]:
        statement = self._base()
        if family:
            statement = statement.where(ModelEntry.family == family.lower())
        if q:
            # ``autoescape``: ``%``, ``_`` and the escape character in ``q`` are literal (``LIKE … ESCAPE '/'``).
            needle = q.lower()
            statement = statement.where(
                or_(
                    func.lower(ModelEntry.name).contains(needle, autoescape=True),
                    func.lower(ModelEntry.hf_id).contains(needle, autoescape=True),
                )
            )
        return statement
