"""An immutable in-memory copy of the catalog, so plans and admission never wait on the database.

The app holds one ``CatalogSnapshot`` in a ``CatalogHolder``. Writes through this replica swap in a fresh
snapshot right after they commit; a background task reloads every ``KVCAP_CATALOG_REFRESH_SECONDS`` to pick up
writes made through other replicas. When the database is down the last good snapshot keeps serving (at start-up,
the built-in catalog does).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from service.core.specs import GpuSpec, ModelSpec

if TYPE_CHECKING:  # the database side is imported where it is used: offline plans never load SQLAlchemy
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    # The schemas (pydantic) are imported where entries are validated: the offline CLI's built-in catalog
    # (``service.catalog.offline``) holds plain entries and never loads them.
    from service.catalog.offline import BuiltinGpuEntry, BuiltinModelEntry
    from service.catalog.schemas import GpuCreate, GpuRead, ModelCreate, ModelRead


@dataclass(frozen=True, slots=True)
class CatalogModel:
    entry: ModelRead | ModelCreate | BuiltinModelEntry
    spec: ModelSpec

    @property
    def name(self) -> str:
        return self.entry.name


@dataclass(frozen=True, slots=True)
class CatalogGpu:
    entry: GpuRead | GpuCreate | BuiltinGpuEntry
    spec: GpuSpec

    @property
    def name(self) -> str:
        return self.entry.name


class LazyModels(Mapping[str, CatalogModel]):
    """Models by name that are made when first read, their entries (all a lookup reads) at hand from the start."""

    entries: Mapping[str, ModelRead | ModelCreate | BuiltinModelEntry]


def lookup_keys(entries: Sequence[ModelRead | ModelCreate | BuiltinModelEntry]) -> dict[str, str]:
    """Lower-cased catalog name, Hugging Face id and alias → the model's name, for ``find_model``.

    Exact names first, then HF ids, then aliases: a later, weaker key never shadows a stronger one."""
    keys: dict[str, str] = {}
    for entry in entries:
        keys.setdefault(entry.name.lower(), entry.name)
    for entry in entries:
        if entry.hf_id:
            keys.setdefault(entry.hf_id.lower(), entry.name)
    for entry in entries:
        for alias in entry.aliases:
            keys.setdefault(alias.lower(), entry.name)
    return keys


def normalize_key(text: str) -> str:
    """Case- and punctuation-insensitive key: ``NVIDIA-H100-80GB-HBM3`` ~ ``nvidia h100 80gb hbm3``."""
    return re.sub(r"[^a-z0-9]+", "", text.lower())


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    models: Mapping[str, CatalogModel]
    gpus: Mapping[str, CatalogGpu]
    source: str
    loaded_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    _model_keys: dict[str, str] = field(default_factory=dict, repr=False)
    _gpu_keys: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls, models: Iterable[ModelRead | ModelCreate], gpus: Iterable[GpuRead | GpuCreate], *, source: str
    ) -> CatalogSnapshot:
        from service.catalog.convert import gpu_spec, model_spec

        model_map: dict[str, CatalogModel] = {}
        for entry in models:
            try:
                spec = model_spec(entry)
            except Exception as exc:  # a stored row the core rejects must not take the catalog down
                import logging  # here only: importing logging costs an offline command a tenth of its start-up

                logging.getLogger("kvcap.catalog").error("catalog model %s skipped: %s", entry.name, exc)
                continue
            model_map[entry.name] = CatalogModel(entry=entry, spec=spec)
        gpu_map = {gpu.name: CatalogGpu(entry=gpu, spec=gpu_spec(gpu.name, gpu)) for gpu in gpus}
        return cls.of(model_map, gpu_map, source=source)

    @classmethod
    def of(
        cls, model_map: Mapping[str, CatalogModel], gpu_map: dict[str, CatalogGpu], *, source: str
    ) -> CatalogSnapshot:
        """The snapshot of entries whose specs are made, with the lookup keys ``find_model``/``find_gpu`` use."""
        model_keys = lookup_keys([model.entry for model in model_map.values()])
        return cls.with_keys(model_map, gpu_map, source=source, model_keys=model_keys)

    @classmethod
    def with_keys(
        cls,
        model_map: Mapping[str, CatalogModel],
        gpu_map: dict[str, CatalogGpu],
        *,
        source: str,
        model_keys: dict[str, str],
    ) -> CatalogSnapshot:
        """``of`` with the models' lookup keys given (``lookup_keys`` of their entries, in the models' order)."""
        gpu_keys: dict[str, str] = {}
        for catalog_gpu in gpu_map.values():
            gpu_keys.setdefault(normalize_key(catalog_gpu.name), catalog_gpu.name)
        for catalog_gpu in gpu_map.values():
            for label in catalog_gpu.entry.product_labels:
                gpu_keys.setdefault(normalize_key(label), catalog_gpu.name)
            if catalog_gpu.entry.display_name:
                gpu_keys.setdefault(normalize_key(catalog_gpu.entry.display_name), catalog_gpu.name)
        return cls(models=model_map, gpus=gpu_map, source=source, _model_keys=model_keys, _gpu_keys=gpu_keys)

    def model_entries(self) -> Mapping[str, ModelRead | ModelCreate | BuiltinModelEntry]:
        """Each model's entry by name, in the models' order, without making the models of ``LazyModels``."""
        if isinstance(self.models, LazyModels):
            return self.models.entries
        return {name: model.entry for name, model in self.models.items()}

    def find_model(self, ref: str) -> CatalogModel | None:
        """By catalog name, Hugging Face id or alias (case-insensitive)."""
        name = self._model_keys.get(ref.strip().lower())
        return self.models.get(name) if name else None

    def find_gpu(self, ref: str) -> CatalogGpu | None:
        """By catalog name, GPU-operator product label or display name (case/punctuation-insensitive)."""
        name = self._gpu_keys.get(normalize_key(ref))
        return self.gpus.get(name) if name else None


def same_content(a: CatalogSnapshot, b: CatalogSnapshot) -> bool:
    """Same source and the same entries (stored rows carry their version and update time, so an edit differs)."""
    return a is b or (a.source == b.source and a.models == b.models and a.gpus == b.gpus)


class CatalogHolder:
    """The current snapshot plus how to reload it; swapping the reference is atomic for readers."""

    def __init__(self, snapshot: CatalogSnapshot) -> None:
        self.snapshot = snapshot
        self.last_error: str | None = None
        self.generation = 0  # bumped when a swap changes the content; caches of derived answers key on it

    def replace(self, snapshot: CatalogSnapshot) -> None:
        """Swap in ``snapshot`` and bump the generation, unless it holds exactly what the current one does.

        The periodic refresh reads the same catalog almost every time: keeping the current object (and its
        generation) then keeps every cache derived from it (plans, admission indexes) warm.
        """
        if same_content(self.snapshot, snapshot):
            return
        self.snapshot = snapshot
        self.generation += 1

    async def reload(self, sessionmaker: async_sessionmaker[AsyncSession]) -> CatalogSnapshot:
        """Read the database's catalog; an empty one (``kvcap catalog load`` never ran) means the built-in
        catalog, at start-up and on every periodic refresh alike."""
        async with sessionmaker() as session:
            snapshot = await read_snapshot(session)
        if not snapshot.models and not snapshot.gpus:
            from service.catalog.builtin import builtin_snapshot  # builtin imports this module

            snapshot = builtin_snapshot()
        self.replace(snapshot)
        self.last_error = None
        return snapshot


async def read_snapshot(session: AsyncSession) -> CatalogSnapshot:
    from service.catalog.repository import GpuRepository, ModelRepository
    from service.catalog.schemas import GpuRead, ModelRead

    models = [ModelRead.model_validate(row) for row in await ModelRepository(session).all()]
    gpus = [GpuRead.model_validate(row) for row in await GpuRepository(session).all()]
    return CatalogSnapshot.build(models, gpus, source="database")
