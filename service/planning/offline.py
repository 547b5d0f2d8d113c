"""Offline plans without the request and response schemas: the command line's fast lane.

``kvcap plan`` and ``kvcap check`` start a process per call, and importing pydantic and the schemas costs more
than the plan. This lane takes settings it can prove valid without them, plans through the same core and
``build_request``, and writes the answer as ``PlanResponse`` would: the same fields in the same order, floats
where the response declares floats, JSON bytes as pydantic writes them. Whatever it cannot prove — a value of
another type, a bound crossed, a serving feature, an inline model or GPU, a name the catalog does not know, a
plan the core refuses — it leaves to the validated path (``None``), which answers (and words every error) as
always. ``tests/planning/test_offline_plan.py`` compares the two over the catalog.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from service.catalog.resolve import resolve_gpu, resolve_model
from service.catalog.snapshot import CatalogSnapshot
from service.core import bounds
from service.core.errors import CoreError
from service.core.planner import CapacityPlan, plan
from service.planning.request import build_request

# ``PlanSettings``' non-feature fields with their defaults (the serving features are left to the schemas).
_DEFAULTS: dict[str, Any] = {
    "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "max_model_len": None,
    "kv_cache_dtype": None,
    "quantization": None,
    "dtype": None,
    "gpu_memory_utilization": None,
    "kv_cache_memory_bytes": None,
    "num_gpu_blocks_override": None,
    "block_size": None,
    "max_num_seqs": None,
    "max_num_batched_tokens": None,
    "enable_chunked_prefill": None,
    "enable_prefix_caching": None,
    "enforce_eager": False,
    "disable_sliding_window": False,
    "async_scheduling": None,
    "device": "cuda",
    "mamba_cache_dtype": None,
    "mamba_ssm_cache_dtype": None,
    "cpu_avx512_bf16": True,
    "engine": None,
}
# ``PlanSettings``' serving-feature fields: unset (``None``) here, anything else goes to the schemas.
FEATURE_FIELDS = (
    "speculative_config",
    "enable_lora",
    "max_loras",
    "max_lora_rank",
    "max_cpu_loras",
    "lora_extra_vocab_size",
    "cpu_offload_gb",
    "kv_transfer_config",
    "kv_offloading_size",
    "kv_offloading_backend",
    "data_parallel_size",
    "enable_expert_parallel",
    "shared_prefix_tokens",
    "limit_mm_per_prompt",
    "mm_processor_kwargs",
    "flashinfer_sampler",
)
# The per-stage pipeline lists: catalog names to resolve and lists to check, left to the schemas like the features.
PIPELINE_LIST_FIELDS = ("pipeline_layer_partition", "pipeline_stage_gpus")
# Inclusive integer ranges (``service.planning.schemas``: ParallelSize, ContextTokens, ByteCount, Positive, …).
_INT_RANGES = {
    "tensor_parallel_size": (1, bounds.MAX_PARALLEL_SIZE),
    "pipeline_parallel_size": (1, bounds.MAX_PARALLEL_SIZE),
    "max_model_len": (1, bounds.MAX_CONTEXT_TOKENS),
    "kv_cache_memory_bytes": (0, 2**62),
    "num_gpu_blocks_override": (1, 2**31 - 1),
    "block_size": (1, bounds.MAX_BLOCK_SIZE),
    "max_num_seqs": (1, bounds.MAX_NUM_SEQS),
    "max_num_batched_tokens": (1, bounds.MAX_BATCHED_TOKENS),
}
_CHOICES = {
    "dtype": frozenset({"auto", "bfloat16", "float16", "float32", "half", "bf16", "fp16"}),
    "device": frozenset({"cuda", "rocm", "cpu"}),
    "mamba_cache_dtype": frozenset({"auto", "float32", "bfloat16", "float16"}),
    "mamba_ssm_cache_dtype": frozenset({"auto", "float32", "bfloat16", "float16"}),
}
_BOOLS = frozenset(
    {
        "enable_chunked_prefill",
        "enable_prefix_caching",
        "enforce_eager",
        "disable_sliding_window",
        "async_scheduling",
        "cpu_avx512_bf16",
    }
)
_SHORT_TEXT = frozenset({"kv_cache_dtype", "quantization", "engine"})  # str, at most 32 characters
# Text every schema accepts as it is: no whitespace to strip, no control character (``service.api.text``).
_PLAIN_TEXT = re.compile(r"[A-Za-z0-9._/:+-]+")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PlainSettings:
    """``PlanSettings`` with no serving feature, for ``build_request`` (which reads these attributes)."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_model_len: int | str | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    dtype: str | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    enforce_eager: bool = False
    disable_sliding_window: bool = False
    async_scheduling: bool | None = None
    device: str = "cuda"
    mamba_cache_dtype: str | None = None
    mamba_ssm_cache_dtype: str | None = None
    cpu_avx512_bf16: bool = True
    engine: str | None = None
    speculative_config: None = None
    enable_lora: None = None
    max_loras: None = None
    max_lora_rank: None = None
    max_cpu_loras: None = None
    lora_extra_vocab_size: None = None
    cpu_offload_gb: None = None
    kv_transfer_config: None = None
    kv_offloading_size: None = None
    kv_offloading_backend: None = None
    data_parallel_size: None = None
    enable_expert_parallel: None = None
    shared_prefix_tokens: None = None
    limit_mm_per_prompt: None = None
    mm_processor_kwargs: None = None
    flashinfer_sampler: None = None
    pipeline_layer_partition: None = None
    pipeline_stage_gpus: None = None


def _valid(name: str, value: object) -> bool:
    """``value`` is one ``PlanSettings`` takes for ``name`` unchanged (or, for a float, as its float)."""
    if value is None:
        return name in _DEFAULTS and _DEFAULTS[name] is None
    if name in _BOOLS:
        return isinstance(value, bool)
    if name in _INT_RANGES:
        if name == "max_model_len" and value == "auto":
            return True
        low, high = _INT_RANGES[name]
        return type(value) is int and low <= value <= high
    if name in _CHOICES:
        return isinstance(value, str) and value in _CHOICES[name]
    if name in _SHORT_TEXT:
        return isinstance(value, str) and len(value) <= 32 and _PLAIN_TEXT.fullmatch(value) is not None
    if name == "gpu_memory_utilization":
        return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1
    return False


def plain_settings(values: Mapping[str, object]) -> PlainSettings | None:
    """The settings ``PlanSettings.model_validate(values)`` makes, when every value is plainly valid; ``None``
    when the schema has to judge (it may refuse, coerce, or read a serving feature)."""
    fields: dict[str, Any] = {}
    for name, value in values.items():
        if name in FEATURE_FIELDS or name in PIPELINE_LIST_FIELDS:
            if value is not None:
                return None
            continue
        if name not in _DEFAULTS or not _valid(name, value):
            return None
        fields[name] = float(value) if name == "gpu_memory_utilization" and value is not None else value  # type: ignore[arg-type]
    return PlainSettings(**fields)


def plain_reference(value: object) -> str | None:
    """A ``--model`` / ``--gpu`` name the schemas take unchanged (a ``RefName`` with nothing to strip)."""
    if isinstance(value, str) and len(value) <= 200 and _PLAIN_TEXT.fullmatch(value):
        return value
    return None


def plain_tokens(value: object) -> bool:
    """``prompt_tokens`` / ``output_tokens`` the schemas take unchanged (``ContextTokens | None``)."""
    return value is None or (type(value) is int and 1 <= value <= bounds.MAX_CONTEXT_TOKENS)


# --- the answer, as ``PlanResponse`` writes it -------------------------------------------------------------

_INTERNAL_FIELDS = frozenset({"layout", "in_flight_tokens", "state_pages", "shared"})
_RESPONSE_ORDER = (
    "model",
    "gpu",
    "settings",
    "kv_cache",
    "memory",
    "fits",
    "exact",
    "max_model_len_that_fits",
    "messages",
    "suggestions",
    "breakdown",
    "stages",
    "projections",
    "calibration",
    "features",
)


def _data(value: object) -> object:
    """A core result as the response's JSON data: dataclasses as objects (their fields in order; the
    fields declared ``float`` as floats, as the response's models declare them), tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, object] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.type in ("float", "float | None") and type(item) is int:
                item = float(item)
            out[f.name] = _data(item)
        return out
    if isinstance(value, tuple | list):
        return [_data(item) for item in value]
    return value


def _subject(name: str, matched_by: str | None = None) -> dict[str, object]:
    return {"name": name, "source": "catalog", "matched_by": matched_by}


def response_data(
    result: CapacityPlan, *, model: dict[str, object], gpu: dict[str, object] | None
) -> dict[str, object]:
    """``make_plan``'s ``PlanResponse`` (uncalibrated: the CLI holds no calibrations) as JSON data."""
    from service.planning.calibration_key import calibration_key_of  # hashlib: ``kvcap check`` never needs it

    subject = SimpleNamespace(**model)
    key = calibration_key_of(result, model=subject, gpu=SimpleNamespace(**gpu) if gpu else None)
    data: dict[str, object] = {
        f.name: _data(getattr(result, f.name))
        for f in dataclasses.fields(result)
        if f.name not in _INTERNAL_FIELDS
    }
    data["model"], data["gpu"] = model, gpu
    data["calibration"] = {
        "applied": False,
        "observed_num_gpu_blocks": None,
        "uncalibrated_num_gpu_blocks": None,
        "samples": 0,
        "key": key,
    }
    return {name: data[name] for name in _RESPONSE_ORDER}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OfflinePlan:
    """One offline plan: its settings (to re-plan at other lengths) and its answer as response data."""

    settings: PlainSettings
    data: dict[str, object]

    @property
    def fits(self) -> bool:
        return bool(self.data["fits"])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OfflinePlanner:
    """Plans of one resolved model and GPU from the built-in catalog, at the settings given."""

    snapshot: CatalogSnapshot
    model: str
    gpu: str | None

    def plan(
        self, settings: PlainSettings, *, prompt_tokens: int | None = None, output_tokens: int | None = None
    ) -> OfflinePlan | None:
        """The plan ``make_plan`` answers, or ``None`` when it would refuse (it words the refusal)."""
        match = resolve_model(self.snapshot, self.model)
        found = resolve_gpu(self.snapshot, self.gpu) if self.gpu is not None else None
        if match is None or (self.gpu is not None and found is None):
            return None
        request = build_request(
            match.model.spec,
            found.spec if found else None,
            settings,
            implied_quantization=match.quantization,
            snapshot=self.snapshot,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
        )
        try:
            result = plan(request)
        except CoreError:
            return None
        model = _subject(match.model.name, match.how)
        gpu = _subject(found.name) if found else None
        return OfflinePlan(settings=settings, data=response_data(result, model=model, gpu=gpu))


def view(data: object) -> Any:
    """Response data as attributes (``plan.kv_cache.num_gpu_blocks``), for the renderers."""
    if isinstance(data, dict):
        return SimpleNamespace(**{k: view(v) for k, v in data.items()})
    if isinstance(data, list):
        return [view(item) for item in data]
    return data


# --- JSON as pydantic writes it ----------------------------------------------------------------------------

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def _string(text: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text) + '"'


def _float(value: float) -> str:
    """pydantic-core's float text: Python's shortest repr, except 1e-05 … 9.9e-05 in decimals and exponents
    without a leading zero (``1e-7``, not ``1e-07``); infinities and NaN as ``null``."""
    if not math.isfinite(value):
        return "null"
    text = repr(value)
    if "e-" not in text:
        return text
    mantissa, exponent = text.split("e-")
    if int(exponent) == 5:
        sign = "-" if mantissa.startswith("-") else ""
        return f"{sign}0.0000{mantissa.lstrip('-').replace('.', '')}"
    return f"{mantissa}e-{int(exponent)}"


def _write(value: object, indent: str, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = indent + "  "
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            out.append(("," if i else "") + "\n" + inner + _string(key) + ": ")
            _write(item, inner, out)
        out.append("\n" + indent + "}")
    elif isinstance(value, list):
        if not value:
            out.append("[]")
            return
        inner = indent + "  "
        out.append("[")
        for i, item in enumerate(value):
            out.append(("," if i else "") + "\n" + inner)
            _write(item, inner, out)
        out.append("\n" + indent + "]")
    else:
        raise TypeError(f"no JSON form for {type(value).__name__}")


def dump_json(value: object) -> str:
    """``model_dump_json(indent=2)``'s text for response data."""
    out: list[str] = []
    _write(value, "", out)
    return "".join(out)
