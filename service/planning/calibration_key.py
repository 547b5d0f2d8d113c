"""A plan's calibration key from the core's result, without the response schemas (``service.planning.calibration``
explains the key; the offline ``kvcap plan`` prints it and imports no pydantic)."""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Hashable
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


# Settings added after keys were first stored, keyed only when they differ from the value every plan before
# them had (``None`` for the stage lists, ``False`` for ``disable_sliding_window``), so the keys of the
# configurations observed before they existed stay what they were.
_KEYED_WHEN_SET: dict[str, object] = {
    "pipeline_layer_partition": None,
    "pipeline_stage_gpus": None,
    "disable_sliding_window": False,
}
# Settings that never change what a calibration corrects (the KV pool's size): prefix caching decides how
# blocks are shared and, on hybrids, how many state pages a request holds, not how many blocks there are.
_NOT_KEYED = frozenset({"enable_prefix_caching"})


def configuration(
    model: Subject, gpu: Subject | None, total_bytes: int, settings: dict[str, Any]
) -> dict[str, Any]:
    return {
        "model": model.name if model.source == "catalog" else f"inline:{model.name}",
        "gpu": (gpu.name if gpu.source == "catalog" else f"inline:{total_bytes}") if gpu else None,
        **{
            k: v
            for k, v in settings.items()
            if k not in _NOT_KEYED and (k not in _KEYED_WHEN_SET or v != _KEYED_WHEN_SET[k])
        },
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
    The canonical JSON of a configuration is written from its template (``key_template``) when it has one.
    """
    length, batched, seqs = _read_per_length(result.settings)
    if type(length) is int and type(batched) is int and type(seqs) is int:
        template = key_template(result, model=model, gpu=gpu)
        if template is not None:
            head, after_length, after_batched, tail = template
            canonical = f"{head}{length}{after_length}{batched}{after_batched}{seqs}{tail}"
            return hashlib.sha256(canonical.encode()).hexdigest()[:32]
    return hash_key(_configuration_of(result, model, gpu))


def _configuration_of(result: CapacityPlan, model: Subject, gpu: Subject | None) -> dict[str, Any]:
    resolved = result.settings
    settings = {name: getattr(resolved, name) for name in _SETTINGS_FIELDS}
    if settings["gpu_memory_utilization"] is not None:
        settings["gpu_memory_utilization"] = float(settings["gpu_memory_utilization"])
    return configuration(model, gpu, result.memory.total_bytes, settings)


_PER_LENGTH = ("max_model_len", "max_num_batched_tokens", "max_num_seqs")
"""The settings that follow the length asked (the batch defaults read it): plans of one configuration at many
lengths share the rest of the canonical JSON, so these three are written into a template of it."""
_read_per_length = operator.attrgetter(*_PER_LENGTH)
_read_rest = operator.attrgetter(*(name for name in _SETTINGS_FIELDS if name not in _PER_LENGTH))
_PLACEHOLDERS = tuple(f"\x00{name}\x00" for name in _PER_LENGTH)  # no name or setting holds a NUL
_TEMPLATES: dict[Hashable, tuple[str, str, str, str] | None] = {}
_MAX_TEMPLATES = 4096


def key_template(
    result: CapacityPlan, *, model: Subject, gpu: Subject | None
) -> tuple[str, str, str, str] | None:
    """The canonical JSON of ``result``'s configuration cut where the ``_PER_LENGTH`` integers go: four pieces;
    the integers written between them (an ``int``'s ``str`` is its JSON) give ``hash_key``'s very string.

    Kept by everything the configuration reads except those three (with the types: ``1`` and ``True`` are
    equal keys but different JSON); ``None`` when a placeholder does not cut the JSON exactly once.
    """
    resolved = result.settings
    if resolved.pipeline_layer_partition is not None or resolved.pipeline_stage_gpus is not None:
        return None  # (1, 2) == (True, 2) but their JSON differs: a configuration with stage lists is hashed whole
    rest = _read_rest(resolved)
    key = (
        model.name,
        model.source,
        (gpu.name, gpu.source) if gpu else None,
        result.memory.total_bytes if gpu and gpu.source != "catalog" else None,
        rest,
        tuple(map(type, rest)),
    )
    try:
        return _TEMPLATES[key]
    except KeyError:
        pass
    configured = _configuration_of(result, model, gpu)
    configured.update(zip(_PER_LENGTH, _PLACEHOLDERS, strict=True))
    canonical = _CANONICAL.encode(configured)
    template: tuple[str, str, str, str] | None = None
    cuts = [_CANONICAL.encode(placeholder) for placeholder in _PLACEHOLDERS]
    if all(canonical.count(cut) == 1 for cut in cuts):
        head, rest_of_it = canonical.split(cuts[0])
        after_length, rest_of_it = rest_of_it.split(cuts[1])
        after_batched, tail = rest_of_it.split(cuts[2])
        template = (head, after_length, after_batched, tail)
    if len(_TEMPLATES) >= _MAX_TEMPLATES:
        _TEMPLATES.clear()
    _TEMPLATES[key] = template
    return template
