"""A plan's calibration key from the core's result, without the response schemas (``service.planning.calibration``
explains the key; the offline ``kvcap plan`` prints it and imports no pydantic)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Protocol

from service.core.planner import ResolvedSettings

if TYPE_CHECKING:
    from service.core.planner import CapacityPlan


class Subject(Protocol):
    """``service.planning.schemas.Subject``'s attributes."""

    @property
    def name(self) -> str: ...

    @property
    def source(self) -> str: ...


# Settings that are ``None`` in every plan without them: left out of the key then, so the keys of the
# configurations observed before they existed stay what they were.
_KEYED_WHEN_SET = ("pipeline_layer_partition", "pipeline_stage_gpus")


def configuration(
    model: Subject, gpu: Subject | None, total_bytes: int, settings: dict[str, Any]
) -> dict[str, Any]:
    return {
        "model": model.name if model.source == "catalog" else f"inline:{model.name}",
        "gpu": (gpu.name if gpu.source == "catalog" else f"inline:{total_bytes}") if gpu else None,
        **{k: v for k, v in settings.items() if v is not None or k not in _KEYED_WHEN_SET},
    }


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
"""``json.dumps(..., sort_keys=True, separators=(",", ":"))`` without building an encoder on every call."""


def hash_key(configuration: dict[str, Any]) -> str:
    canonical = _CANONICAL.encode(configuration)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


# ``SettingsOut``'s fields are ``ResolvedSettings``' (tests/planning/test_offline_plan.py holds them equal).
_SETTINGS_FIELDS = tuple(f.name for f in fields(ResolvedSettings))


def calibration_key_of(result: CapacityPlan, *, model: Subject, gpu: Subject | None) -> str:
    """``calibration_key`` of the response the core's ``result`` becomes, read from the result itself.

    The response's settings are the core's ``ResolvedSettings`` field for field; only the utilisation is a
    float in the response whatever number the core holds, so it is made one here (the key hashes its JSON).
    """
    resolved = result.settings
    settings = {name: getattr(resolved, name) for name in _SETTINGS_FIELDS}
    if settings["gpu_memory_utilization"] is not None:
        settings["gpu_memory_utilization"] = float(settings["gpu_memory_utilization"])
    return hash_key(configuration(model, gpu, result.memory.total_bytes, settings))
