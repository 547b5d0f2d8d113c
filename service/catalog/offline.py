"""The built-in catalog as the core's specs, read without the catalog's pydantic schemas.

``service.catalog.builtin.builtin_snapshot`` validates every shipped entry into ``ModelCreate`` / ``GpuCreate``
and converts those into specs; importing the schemas costs more than the offline ``kvcap plan`` / ``kvcap check``
that need them. This module reads the same files (``builtin/gpus.json``, ``builtin/models/*.json``), the model
configs through the same ``parse_hf_config``, and makes the same specs and lookup keys directly: the entries it
keeps hold only what lookups read (name, Hugging Face id, aliases; product labels, display name), and a model's
config is parsed when the model is first read (``BuiltinModels``), so a plan parses one. The data is read
on every call of a fresh process, never cached on disk, so an upgraded package can never be answered from stale
data. ``tests/catalog/test_offline_catalog.py`` holds the two snapshots equal, spec for spec and key for key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from service.catalog.snapshot import CatalogGpu, CatalogModel, CatalogSnapshot, LazyModels, lookup_keys
from service.core.hf_config import parse_hf_config
from service.core.specs import GpuSpec, ModelSpec

DATA = Path(__file__).with_name("builtin")


@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltinModelEntry:
    """What model lookups read of a catalog entry (``ModelCreate``'s fields of the same names)."""

    name: str
    hf_id: str | None = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltinGpuEntry:
    """What GPU lookups read of a catalog entry (``GpuCreate``'s fields of the same names)."""

    name: str
    display_name: str | None = None
    product_labels: tuple[str, ...] = ()
    price_per_hour_usd: float | None = None


def model_entry_of(record: dict[str, Any]) -> BuiltinModelEntry:
    return BuiltinModelEntry(
        name=record["name"], hf_id=record.get("hf_id"), aliases=tuple(record.get("aliases") or ())
    )


def model_spec_of(record: dict[str, Any]) -> ModelSpec:
    """``model_spec(model_from_record(record))`` without the schemas: the parsed config, with the record's
    quantisation and active-parameter count (``service.catalog.builtin.model_from_record``), and no notes (the
    catalog's fields do not hold the parser's notes)."""
    spec = parse_hf_config(record["hf_config"], num_parameters=record.get("num_parameters"))
    changes: dict[str, Any] = {"notes": ()}
    if record.get("quantization"):
        changes["quantization"] = record["quantization"]
    if record.get("num_active_parameters"):
        changes["num_active_parameters"] = record["num_active_parameters"]
    return replace(spec, **changes)


class BuiltinModels(LazyModels):
    """The built-in models by name, in file order, each model's config parsed the first time it is read.

    A command plans one model or a few, and parsing every config costs more than the plan; what a lookup reads
    (names, Hugging Face ids, aliases) is in ``entries`` from the start. Reading a model gives the record's entry
    and ``model_spec_of`` it, the same object each time."""

    def __init__(self, records: Iterable[dict[str, Any]]) -> None:
        self._records = {record["name"]: record for record in records}
        self.entries: dict[str, BuiltinModelEntry] = {
            name: model_entry_of(record) for name, record in self._records.items()
        }
        self._models: dict[str, CatalogModel] = {}

    def __getitem__(self, name: str) -> CatalogModel:
        model = self._models.get(name)
        if model is None:
            spec = model_spec_of(self._records[name])
            model = self._models[name] = CatalogModel(entry=self.entries[name], spec=spec)
        return model

    def __contains__(self, name: object) -> bool:
        return name in self._records

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)


def gpu_of(record: dict[str, Any]) -> CatalogGpu:
    """``gpu_spec(name, GpuCreate(**record))`` without the schema (its defaults for the lists not given)."""
    name = record["name"]
    interconnect = record.get("interconnect") or {}
    price = record.get("price_per_hour_usd")
    spec = GpuSpec(
        name=name,
        memory_bytes=record.get("usable_memory_bytes") or record["memory_bytes"],
        memory_bandwidth_bytes_per_second=record.get("memory_bandwidth_bytes_per_second"),
        bf16_dense_flops_per_second=record.get("bf16_dense_flops_per_second"),
        fp8_dense_flops_per_second=record.get("fp8_dense_flops_per_second"),
        interconnect_bandwidth_bytes_per_second=interconnect.get("bandwidth_bytes_per_second"),
        price_per_hour_usd=float(price) if price is not None else None,
        supports_fp8=any(d.startswith("fp8") for d in record.get("supported_kv_cache_dtypes", ["auto"])),
        supports_bf16="bfloat16" in record.get("supported_weight_dtypes", ["bfloat16", "float16"]),
        compute_capability=record.get("compute_capability"),
    )
    entry = BuiltinGpuEntry(
        name=name,
        display_name=record.get("display_name"),
        product_labels=tuple(record.get("product_labels") or ()),
        price_per_hour_usd=spec.price_per_hour_usd,
    )
    return CatalogGpu(entry=entry, spec=spec)


@lru_cache(maxsize=1)
def offline_snapshot() -> CatalogSnapshot:
    """The shipped catalog, as ``builtin_snapshot`` makes it, for the offline command line."""
    files = sorted((f for f in (DATA / "models").iterdir() if f.name.endswith(".json")), key=lambda f: f.name)
    models = BuiltinModels(json.loads(file.read_text(encoding="utf-8")) for file in files)
    gpus: dict[str, CatalogGpu] = {}
    for record in json.loads((DATA / "gpus.json").read_text(encoding="utf-8")):
        gpu = gpu_of(record)
        gpus[gpu.name] = gpu
    model_keys = lookup_keys(list(models.entries.values()))
    return CatalogSnapshot.with_keys(models, gpus, source="builtin", model_keys=model_keys)
