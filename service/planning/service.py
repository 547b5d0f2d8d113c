"""Plans over the in-memory catalog: resolve the model and GPU, run the pure planner, shape the response.

No database access happens here, so plans keep answering while the database is down.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import ConfigDict, TypeAdapter, with_config
from typing_extensions import TypedDict  # pydantic needs this one below Python 3.12

from service.catalog.resolve import resolve_gpu, resolve_model
from service.catalog.snapshot import CatalogSnapshot
from service.core.errors import ConfigError, InvalidSpec
from service.core.hf_config import parse_hf_config
from service.core.planner import (
    CapacityPlan,
    KvCacheResult,
    MemoryResult,
    Message,
    PlanRequest,
    Projections,
    ResolvedSettings,
    StageResult,
    Suggestion,
    Term,
    plan,
)
from service.core.planner.features import (
    KvTransferConfig,
    LoraConfig,
    MultimodalConfig,
    ServingFeatures,
    SpeculativeConfig,
)
from service.core.planner.results import FeaturesResult
from service.core.specs import GpuSpec, ModelSpec
from service.errors import Unprocessable
from service.planning.calibration import (
    CalibrationHolder,
    apply_calibration,
    calibration_for,
    calibration_key_of,
)
from service.planning.schemas import (
    CalibrationOut,
    InlineGpu,
    InlineModel,
    PlanRequestBody,
    PlanResponse,
    PlanSettings,
    Subject,
)

_DTYPE_ALIASES = {"auto": None, "half": "float16", "fp16": "float16", "bf16": "bfloat16"}


@dataclasses.dataclass(frozen=True, slots=True)
class ResolvedModel:
    spec: ModelSpec
    subject: Subject
    implied_quantization: str | None = None


def resolve_model_ref(
    snapshot: CatalogSnapshot, ref: str | InlineModel, *, field: str = "model"
) -> ResolvedModel:
    if isinstance(ref, InlineModel):
        try:
            spec = parse_hf_config(ref.hf_config, num_parameters=ref.num_parameters)
        except ConfigError as exc:
            raise Unprocessable.for_field(
                f"{field}.hf_config.{exc.field}" if exc.field else f"{field}.hf_config", exc.message
            ) from None
        return ResolvedModel(
            spec=spec, subject=Subject(name=ref.name or spec.architecture or "inline", source="inline")
        )
    match = resolve_model(snapshot, ref)
    if match is None:
        raise Unprocessable.for_field(
            field,
            f"unknown model {ref!r}: not a catalog name, Hugging Face id or alias (see GET /v1/models, or pass {{'hf_config': ...}})",
        )
    return ResolvedModel(
        spec=match.model.spec,
        subject=Subject(name=match.model.name, source="catalog", matched_by=match.how),
        implied_quantization=match.quantization,
    )


def resolve_gpu_ref(
    snapshot: CatalogSnapshot, ref: str | InlineGpu | None, *, field: str = "gpu"
) -> tuple[GpuSpec | None, Subject | None]:
    if ref is None:
        return None, None
    if isinstance(ref, InlineGpu):
        spec = GpuSpec(**ref.model_dump())
        return spec, Subject(name=ref.name, source="inline")
    found = resolve_gpu(snapshot, ref)
    if found is None:
        raise Unprocessable.for_field(
            field,
            f"unknown GPU {ref!r}: not a catalog name or product label (see GET /v1/gpus, or pass {{'memory_bytes': ...}})",
        )
    return found.spec, Subject(name=found.name, source="catalog")


_FEATURE_FIELDS = (
    "speculative_config",
    "cpu_offload_gb",
    "kv_transfer_config",
    "kv_offloading_size",
    "shared_prefix_tokens",
    "limit_mm_per_prompt",
    "mm_processor_kwargs",
)


def _features_off(settings: PlanSettings) -> bool:
    """No serving feature asked for (``false``, ``1`` and ``0`` GiB ask for nothing either)."""
    return (
        all(getattr(settings, name) is None for name in _FEATURE_FIELDS)
        and not settings.enable_lora
        and not settings.enable_expert_parallel
        and (settings.data_parallel_size or 1) == 1
    )


def _int_extra(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value > 2**62:
        raise Unprocessable.for_field(
            f"kv_transfer_config.kv_connector_extra_config.{key}", "must be a non-negative number"
        )
    return int(value)


def serving_features(settings: PlanSettings, snapshot: CatalogSnapshot | None) -> ServingFeatures | None:
    """The request's serving features for the core (``None`` when none is set: the plan's fast path)."""
    if _features_off(settings):
        return None
    speculative = None
    spec_in = settings.speculative_config
    if spec_in is not None:
        draft = None
        if spec_in.model is not None:
            if isinstance(spec_in.model, str) and snapshot is None:
                raise Unprocessable.for_field("speculative_config.model", "a catalog model needs the catalog")
            catalog = snapshot if snapshot is not None else CatalogSnapshot.build((), (), source="inline")
            draft = resolve_model_ref(catalog, spec_in.model, field="speculative_config.model").spec
        speculative = SpeculativeConfig(
            # vllm/config/speculative.py: a draft model without a method is ``draft_model``.
            method=spec_in.method or "draft_model",
            num_speculative_tokens=spec_in.num_speculative_tokens,
            draft=draft,
            draft_tensor_parallel_size=spec_in.draft_tensor_parallel_size,
        )
    lora = None
    if settings.enable_lora:
        lora = LoraConfig(
            max_loras=settings.max_loras or 1,
            max_lora_rank=settings.max_lora_rank or 16,
            max_cpu_loras=settings.max_cpu_loras,
            lora_extra_vocab_size=settings.lora_extra_vocab_size,
        )
    kv = None
    transfer = settings.kv_transfer_config
    if transfer is not None or settings.kv_offloading_size is not None:
        extra = transfer.kv_connector_extra_config if transfer else {}
        lmcache = extra.get("max_local_cpu_size")
        if lmcache is not None and (
            not isinstance(lmcache, int | float) or isinstance(lmcache, bool) or lmcache < 0
        ):
            raise Unprocessable.for_field(
                "kv_transfer_config.kv_connector_extra_config.max_local_cpu_size", "must be GiB ≥ 0"
            )
        kv = KvTransferConfig(
            kv_connector=transfer.kv_connector if transfer else None,
            kv_role=transfer.kv_role if transfer else None,
            num_cpu_blocks=_int_extra(extra, "num_cpu_blocks"),
            cpu_bytes_to_use=_int_extra(extra, "cpu_bytes_to_use"),
            lmcache_cpu_gib=float(lmcache) if lmcache is not None else None,
            kv_offloading_size_gib=settings.kv_offloading_size,
            kv_offloading_backend=settings.kv_offloading_backend,
        )
    return ServingFeatures(
        speculative=speculative,
        lora=lora,
        cpu_offload_gb=settings.cpu_offload_gb or 0.0,
        kv_transfer=kv,
        data_parallel_size=settings.data_parallel_size or 1,
        enable_expert_parallel=bool(settings.enable_expert_parallel),
        shared_prefix_tokens=settings.shared_prefix_tokens or 0,
        multimodal=_multimodal(settings),
    )


def _multimodal(settings: PlanSettings) -> MultimodalConfig | None:
    limits, kwargs = settings.limit_mm_per_prompt, settings.mm_processor_kwargs
    if limits is None and kwargs is None:
        return None
    max_pixels = (kwargs or {}).get("max_pixels")
    if max_pixels is not None and (
        isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or not 1 <= max_pixels <= 2**40
    ):
        raise Unprocessable.for_field("mm_processor_kwargs.max_pixels", "must be a positive integer")
    return MultimodalConfig(limit_mm_per_prompt=tuple(sorted((limits or {}).items())), max_pixels=max_pixels)


def build_request(
    model: ModelSpec,
    gpu: GpuSpec | None,
    settings: PlanSettings,
    *,
    implied_quantization: str | None = None,
    snapshot: CatalogSnapshot | None = None,
    **extra: Any,
) -> PlanRequest:
    dtype = _DTYPE_ALIASES.get(settings.dtype, settings.dtype) if settings.dtype else None
    auto = settings.max_model_len == "auto"
    return PlanRequest(
        model=model,
        gpu=gpu,
        engine=settings.engine,
        tensor_parallel_size=settings.tensor_parallel_size,
        pipeline_parallel_size=settings.pipeline_parallel_size,
        max_model_len=None if auto or settings.max_model_len is None else int(settings.max_model_len),
        max_model_len_auto=auto,
        kv_cache_dtype=settings.kv_cache_dtype,
        quantization=settings.quantization or implied_quantization,
        dtype=dtype,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        kv_cache_memory_bytes=settings.kv_cache_memory_bytes,
        num_gpu_blocks_override=settings.num_gpu_blocks_override,
        block_size=settings.block_size,
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        enable_chunked_prefill=settings.enable_chunked_prefill,
        enforce_eager=settings.enforce_eager,
        async_scheduling=settings.async_scheduling,
        device=settings.device,
        mamba_cache_dtype=settings.mamba_cache_dtype,
        mamba_ssm_cache_dtype=settings.mamba_ssm_cache_dtype,
        cpu_avx512_bf16=settings.cpu_avx512_bf16,
        features=serving_features(settings, snapshot),
        **extra,
    )


_INTERNAL_FIELDS = frozenset({"layout", "in_flight_tokens", "state_pages"})


_RESPONSE_FIELDS = tuple(f.name for f in dataclasses.fields(CapacityPlan) if f.name not in _INTERNAL_FIELDS)


def to_response(
    result: CapacityPlan,
    *,
    model: Subject,
    gpu: Subject | None,
    calibration: CalibrationOut | None = None,
) -> PlanResponse:
    """Validate the core's dataclasses straight into the response models (attribute access, no deep copies)."""
    data = {name: getattr(result, name) for name in _RESPONSE_FIELDS}
    data["model"], data["gpu"] = model, gpu
    if calibration is not None:
        data["calibration"] = calibration
    return PlanResponse.model_validate(data, from_attributes=True)


def make_plan(
    snapshot: CatalogSnapshot, body: PlanRequestBody, calibrations: CalibrationHolder | None = None
) -> PlanResponse:
    planned = _plan_for(snapshot, body)
    if calibration_for(planned.key, calibrations, exact=planned.result.exact) is None:  # the usual case
        uncalibrated = CalibrationOut(applied=False, key=planned.key)
        return to_response(planned.result, model=planned.model, gpu=planned.gpu, calibration=uncalibrated)
    response = to_response(planned.result, model=planned.model, gpu=planned.gpu)
    return apply_calibration(response, calibrations, key=planned.key)


def make_plan_json(
    snapshot: CatalogSnapshot, body: PlanRequestBody, calibrations: CalibrationHolder | None = None
) -> bytes:
    """``make_plan(...).model_dump_json()``, the same bytes; an uncalibrated plan (the usual case) is written
    straight from the core's dataclasses (``PLAN_JSON``) instead of being validated into ``PlanResponse``."""
    planned = _plan_for(snapshot, body)
    if calibration_for(planned.key, calibrations, exact=planned.result.exact) is not None:
        response = to_response(planned.result, model=planned.model, gpu=planned.gpu)
        return apply_calibration(response, calibrations, key=planned.key).model_dump_json().encode()
    result = planned.result
    fields: PlanFields = {
        "model": planned.model,
        "gpu": planned.gpu,
        "settings": result.settings,
        "kv_cache": result.kv_cache,
        "memory": result.memory,
        "fits": result.fits,
        "exact": result.exact,
        "max_model_len_that_fits": result.max_model_len_that_fits,
        "messages": result.messages,
        "suggestions": result.suggestions,
        "breakdown": result.breakdown,
        "stages": result.stages,
        "projections": result.projections,
        "calibration": CalibrationOut(applied=False, key=planned.key),
        "features": result.features,
    }
    return PLAN_JSON.dump_json(fields)


@dataclasses.dataclass(frozen=True, slots=True)
class _Planned:
    result: CapacityPlan
    model: Subject
    gpu: Subject | None
    key: str  # the calibration key


_RESOLVED_PER_SNAPSHOT = 1024
"""Catalog names remembered per snapshot (a flood of distinct unknown names is never remembered)."""
_RESOLVED: dict[int, tuple[CatalogSnapshot, dict[tuple[str, str | None], Any]]] = {}


def _resolved_refs(
    snapshot: CatalogSnapshot, model: str, gpu: str | None
) -> tuple[ResolvedModel, tuple[GpuSpec | None, Subject | None]]:
    """``resolve_model_ref`` and ``resolve_gpu_ref`` of catalog names, once per snapshot and pair of names.

    A snapshot is immutable and replaced whole on reload, so what its names resolve to is kept with it (under
    its identity, holding it so that the identity is not reused) and goes with it: a reloaded catalog resolves
    afresh. A name that does not resolve raises every time (nothing is kept for it).
    """
    cached = _RESOLVED.get(id(snapshot))
    if cached is None or cached[0] is not snapshot:
        if len(_RESOLVED) >= 4:  # a few generations of the catalog at most
            _RESOLVED.clear()
        cached = _RESOLVED[id(snapshot)] = (snapshot, {})
    known = cached[1]
    found: tuple[ResolvedModel, tuple[GpuSpec | None, Subject | None]] | None = known.get((model, gpu))
    if found is None:
        found = (resolve_model_ref(snapshot, model), resolve_gpu_ref(snapshot, gpu))
        if len(known) < _RESOLVED_PER_SNAPSHOT:
            known[(model, gpu)] = found
    return found


def _plan_for(snapshot: CatalogSnapshot, body: PlanRequestBody) -> _Planned:
    if isinstance(body.model, str) and (body.gpu is None or isinstance(body.gpu, str)):
        resolved, (gpu, gpu_subject) = _resolved_refs(snapshot, body.model, body.gpu)
    else:
        resolved = resolve_model_ref(snapshot, body.model)
        gpu, gpu_subject = resolve_gpu_ref(snapshot, body.gpu)
    request = build_request(
        resolved.spec,
        gpu,
        body,
        implied_quantization=resolved.implied_quantization,
        snapshot=snapshot,
        prompt_tokens=body.prompt_tokens,
        output_tokens=body.output_tokens,
    )
    try:
        result = plan(request)
    except InvalidSpec as exc:
        raise Unprocessable.for_field(exc.field, exc.message) from None
    key = calibration_key_of(result, model=resolved.subject, gpu=gpu_subject)
    return _Planned(result=result, model=resolved.subject, gpu=gpu_subject, key=key)


@with_config(ConfigDict(defer_build=True))  # built on the first plan, not when the CLI imports this
class PlanFields(TypedDict):
    """``PlanResponse``'s fields in its order, holding the core's result dataclasses (same names, same order)."""

    model: Subject
    gpu: Subject | None
    settings: ResolvedSettings
    kv_cache: KvCacheResult
    memory: MemoryResult
    fits: bool
    exact: bool
    max_model_len_that_fits: int
    messages: tuple[Message, ...]
    suggestions: tuple[Suggestion, ...]
    breakdown: tuple[Term, ...]
    stages: tuple[StageResult, ...]
    projections: Projections | None
    calibration: CalibrationOut | None
    features: FeaturesResult | None


PLAN_JSON: TypeAdapter[PlanFields] = TypeAdapter(PlanFields)
"""Writes ``PlanFields`` as ``PlanResponse.model_dump_json`` writes the response (tests/planning/test_lane.py
compares the two over the catalog)."""
