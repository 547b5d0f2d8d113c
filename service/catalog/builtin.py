"""The catalog kvcap ships with: GPUs from vendor datasheets and models from their published config.json.

Data lives in ``builtin/gpus.json`` and ``builtin/models/<name>.json``; each model file holds the Hugging Face
config as published, and goes through the same ``parse_hf_config`` as ``POST /v1/models/import``, so the built-in
entries and imported ones can never disagree on how a config is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from service.catalog.convert import architecture_values
from service.catalog.schemas import GpuCreate, ModelCreate
from service.catalog.snapshot import CatalogSnapshot
from service.core.hf_config import parse_hf_config

if TYPE_CHECKING:  # the database side is imported by load_builtin only: offline plans never load SQLAlchemy
    from sqlalchemy.ext.asyncio import AsyncSession

    from service.catalog.orm import GpuEntry, ModelEntry
    from service.catalog.repository import GpuRepository, ModelRepository

_DATA = resources.files("service.catalog") / "builtin"
_MODEL_META_KEYS = ("name", "hf_id", "aliases", "family", "source", "notes")


def model_from_record(record: dict[str, Any]) -> ModelCreate:
    """A catalog model from a ``{name, hf_id, …, hf_config}`` record (built-in file or import request)."""
    spec = parse_hf_config(record["hf_config"], num_parameters=record.get("num_parameters"))
    values = architecture_values(spec)
    if record.get("quantization"):
        values["quantization"] = record["quantization"]
    if record.get("num_active_parameters"):
        values["num_active_parameters"] = record["num_active_parameters"]
    for key in _MODEL_META_KEYS:
        if record.get(key) is not None:
            values[key] = record[key]
    if not values.get("family") and spec.model_type:
        values["family"] = spec.model_type.lower()
    return ModelCreate(**values)


@lru_cache(maxsize=1)
def builtin_gpus() -> tuple[GpuCreate, ...]:
    records = json.loads((_DATA / "gpus.json").read_text())
    allowed = set(GpuCreate.model_fields)
    return tuple(GpuCreate(**{k: v for k, v in record.items() if k in allowed}) for record in records)


@lru_cache(maxsize=1)
def builtin_model_records() -> tuple[dict[str, Any], ...]:
    files = sorted(
        (f for f in (_DATA / "models").iterdir() if f.name.endswith(".json")), key=lambda f: f.name
    )
    return tuple(json.loads(f.read_text()) for f in files)


@lru_cache(maxsize=1)
def builtin_models() -> tuple[ModelCreate, ...]:
    return tuple(model_from_record(record) for record in builtin_model_records())


@lru_cache(maxsize=1)
def builtin_snapshot() -> CatalogSnapshot:
    """The shipped catalog without a database (offline CLI, and the fallback when the database is down)."""
    return CatalogSnapshot.build(builtin_models(), builtin_gpus(), source="builtin")


@dataclass(frozen=True, slots=True)
class LoadResult:
    inserted: int
    updated: int
    unchanged: int
    kept_user_edits: int


def _differs(entry: GpuEntry | ModelEntry, values: dict[str, Any]) -> bool:
    return any(getattr(entry, key) != value for key, value in values.items())


async def load_builtin(session: AsyncSession) -> LoadResult:
    """Insert missing built-in entries and refresh unedited ones; entries edited through the API are kept.

    Idempotent: a second run changes nothing. The caller commits.
    """
    from service.catalog.orm import GpuEntry, ModelEntry
    from service.catalog.repository import GpuRepository, ModelRepository

    inserted = updated = unchanged = kept = 0
    gpu_repo, model_repo = GpuRepository(session), ModelRepository(session)
    pairs: list[
        tuple[GpuRepository | ModelRepository, type[GpuEntry] | type[ModelEntry], dict[str, Any]]
    ] = []
    pairs += [(gpu_repo, GpuEntry, gpu.model_dump(mode="json")) for gpu in builtin_gpus()]
    for model in builtin_models():
        values = model.model_dump(mode="json")
        values["hf_config"] = next(r["hf_config"] for r in builtin_model_records() if r["name"] == model.name)
        pairs.append((model_repo, ModelEntry, values))
    for repo, orm_class, values in pairs:
        existing = await repo.get_by_name(values["name"])
        if existing is None:
            await repo.add(orm_class(**values, origin="builtin"))  # type: ignore[arg-type]
            inserted += 1
        elif existing.origin != "builtin":
            kept += 1
        elif _differs(existing, values):
            await repo.update(existing, values)  # type: ignore[arg-type]
            updated += 1
        else:
            unchanged += 1
    return LoadResult(inserted=inserted, updated=updated, unchanged=unchanged, kept_user_edits=kept)
