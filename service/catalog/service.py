"""Catalog business rules: validation beyond field types, optimistic concurrency, snapshot refresh.

Functions flush but never commit (the request's unit of work does). Every write validates the *resulting*
entry through the core before it is flushed, so a rejected change leaves the stored entry untouched.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.api.etag import check_if_match
from service.api.pagination import Page, PageParams
from service.catalog.builtin import model_from_record
from service.catalog.convert import gpu_spec, model_spec
from service.catalog.orm import GpuEntry, ModelEntry
from service.catalog.repository import GpuRepository, ModelRepository
from service.catalog.schemas import (
    GpuCreate,
    GpuRead,
    GpuUpdate,
    ModelCreate,
    ModelImport,
    ModelImportResult,
    ModelRead,
    ModelUpdate,
)
from service.catalog.snapshot import CatalogHolder
from service.core.errors import ConfigError, InvalidSpec
from service.core.hf_config import parse_hf_config
from service.db.session import after_commit
from service.errors import Conflict, NotFound, Unprocessable


def _refresh_after_commit(
    session: AsyncSession, holder: CatalogHolder | None, maker: async_sessionmaker[AsyncSession] | None
) -> None:
    if holder is None or maker is None:
        return

    async def _reload() -> None:
        await holder.reload(maker)

    after_commit(session, _reload)


def _validate_gpu(gpu: GpuCreate) -> None:
    if gpu.usable_memory_bytes is not None and gpu.usable_memory_bytes > gpu.memory_bytes:
        raise Unprocessable.for_field(
            "usable_memory_bytes",
            f"({gpu.usable_memory_bytes}) cannot exceed memory_bytes ({gpu.memory_bytes})",
        )
    try:
        gpu_spec(gpu.name, gpu)
    except InvalidSpec as exc:
        raise Unprocessable.for_field(exc.field, exc.message) from None


def _validate_model(model: ModelCreate) -> None:
    try:
        model_spec(model)
    except InvalidSpec as exc:
        raise Unprocessable.for_field(exc.field, exc.message) from None
    if model.num_active_parameters and model.num_active_parameters > model.num_parameters:
        raise Unprocessable.for_field("num_active_parameters", "cannot exceed num_parameters")


class CatalogService:
    def __init__(
        self,
        session: AsyncSession,
        *,
        holder: CatalogHolder | None = None,
        sessionmaker: async_sessionmaker[AsyncSession] | None = None,
    ) -> None:
        self.session = session
        self.gpus = GpuRepository(session)
        self.models = ModelRepository(session)
        self.holder = holder
        self.sessionmaker = sessionmaker

    # GPUs ---------------------------------------------------------------------------------------------------
    async def list_gpus(self, *, page: PageParams, vendor: str | None, q: str | None) -> Page[GpuRead]:
        rows, total = await self.gpus.page(
            self.gpus.filtered(vendor=vendor, q=q), limit=page.limit, offset=page.offset
        )
        return Page(
            items=[GpuRead.model_validate(r) for r in rows], total=total, limit=page.limit, offset=page.offset
        )

    async def get_gpu(self, name: str, *, for_update: bool = False) -> GpuEntry:
        entry = await self.gpus.get_by_name(name, for_update=for_update)
        if entry is None:
            raise NotFound(f"GPU {name!r} is not in the catalog")
        return entry

    async def create_gpu(self, data: GpuCreate) -> GpuEntry:
        _validate_gpu(data)
        if await self.gpus.get_by_name(data.name) is not None:
            raise Conflict(f"GPU {data.name!r} already exists; PATCH it instead")
        entry = await self.gpus.add(GpuEntry(**data.model_dump(mode="json"), origin="user"))
        _refresh_after_commit(self.session, self.holder, self.sessionmaker)
        return entry

    async def update_gpu(self, name: str, patch: GpuUpdate, *, if_match: str | None) -> GpuEntry:
        entry = await self.get_gpu(name, for_update=True)
        check_if_match(if_match, entry.etag)
        changes = patch.model_dump(mode="json", exclude_unset=True)
        merged = GpuRead.model_validate(entry).model_dump(mode="json") | changes
        try:
            candidate = GpuCreate(**{k: v for k, v in merged.items() if k in GpuCreate.model_fields})
        except ValueError as exc:
            raise Unprocessable(f"the change would make the entry invalid: {exc}") from None
        _validate_gpu(candidate)
        values = {k: v for k, v in candidate.model_dump(mode="json").items() if k in changes}
        await self.gpus.update(entry, {**values, "origin": "user"})
        _refresh_after_commit(self.session, self.holder, self.sessionmaker)
        return entry

    async def delete_gpu(self, name: str, *, if_match: str | None) -> None:
        entry = await self.get_gpu(name, for_update=True)
        check_if_match(if_match, entry.etag)
        await self.gpus.delete(entry)
        _refresh_after_commit(self.session, self.holder, self.sessionmaker)

    # Models -------------------------------------------------------------------------------------------------
    async def list_models(self, *, page: PageParams, family: str | None, q: str | None) -> Page[ModelRead]:
        rows, total = await self.models.page(
            self.models.filtered(family=family, q=q), limit=page.limit, offset=page.offset
        )
        return Page(
            items=[ModelRead.model_validate(r) for r in rows],
            total=total,
            limit=page.limit,
            offset=page.offset,
        )

    async def get_model(self, name: str, *, for_update: bool = False) -> ModelEntry:
        entry = await self.models.get_by_name(name, for_update=for_update)
        if entry is None:
            raise NotFound(f"model {name!r} is not in the catalog")
        return entry

    async def create_model(
        self, data: ModelCreate, *, origin: str = "user", hf_config: dict[str, Any] | None = None
    ) -> ModelEntry:
        _validate_model(data)
        if await self.models.get_by_name(data.name) is not None:
            raise Conflict(f"model {data.name!r} already exists; PATCH it instead")
        entry = await self.models.add(
            ModelEntry(**data.model_dump(mode="json"), origin=origin, hf_config=hf_config)
        )
        _refresh_after_commit(self.session, self.holder, self.sessionmaker)
        return entry

    async def update_model(self, name: str, patch: ModelUpdate, *, if_match: str | None) -> ModelEntry:
        entry = await self.get_model(name, for_update=True)
        check_if_match(if_match, entry.etag)
        changes = patch.model_dump(mode="json", exclude_unset=True)
        merged = ModelRead.model_validate(entry).model_dump(mode="json") | changes
        try:
            candidate = ModelCreate(**{k: v for k, v in merged.items() if k in ModelCreate.model_fields})
        except ValueError as exc:
            raise Unprocessable(f"the change would make the entry invalid: {exc}") from None
        _validate_model(candidate)
        values = {k: v for k, v in candidate.model_dump(mode="json").items() if k in changes}
        await self.models.update(entry, {**values, "origin": "user"})
        _refresh_after_commit(self.session, self.holder, self.sessionmaker)
        return entry

    async def delete_model(self, name: str, *, if_match: str | None) -> None:
        entry = await self.get_model(name, for_update=True)
        check_if_match(if_match, entry.etag)
        await self.models.delete(entry)
        _refresh_after_commit(self.session, self.holder, self.sessionmaker)

    async def import_model(self, request: ModelImport, *, dry_run: bool = False) -> ModelImportResult:
        """Map an HF config to catalog fields (``parse_hf_config``) and store it unless ``dry_run``."""
        record: dict[str, Any] = request.model_dump(exclude_none=True)
        if "source" not in record:
            record["source"] = (
                f"https://huggingface.co/{request.hf_id}" if request.hf_id else "imported config.json"
            )
        try:
            interpretation = list(
                parse_hf_config(request.hf_config, num_parameters=request.num_parameters).notes
            )
            model = model_from_record(record)
        except ConfigError as exc:
            raise Unprocessable.for_field(
                f"hf_config.{exc.field}" if exc.field else "hf_config", exc.message
            ) from None
        except InvalidSpec as exc:
            raise Unprocessable.for_field(exc.field, exc.message) from None
        except ValueError as exc:  # pydantic: a derived value outside the catalog's bounds
            raise Unprocessable(f"hf_config could not be mapped to catalog fields: {exc}") from None
        if dry_run:
            _validate_model(model)
            return ModelImportResult(model=model, interpretation=interpretation, stored=False)
        entry = await self.create_model(model, origin="import", hf_config=request.hf_config)
        return ModelImportResult(
            model=ModelRead.model_validate(entry), interpretation=interpretation, stored=True
        )
