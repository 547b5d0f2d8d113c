"""The core's ``PlanRequest`` from resolved specs and vLLM settings, without the request schemas.

``settings`` is anything with ``PlanSettings``' attributes: the validated request (``PlanSettings`` and its
subclasses) or the offline command line's plain settings (``service.planning.offline``). Nothing here imports
pydantic, so the offline ``kvcap plan`` and ``kvcap check`` build their requests without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from service.core.planner import PlanRequest
from service.core.planner.features import (
    KvTransferConfig,
    LoraConfig,
    MultimodalConfig,
    ServingFeatures,
    SpeculativeConfig,
)
from service.core.specs import GpuSpec, ModelSpec
from service.errors import Unprocessable

if TYPE_CHECKING:
    from service.catalog.snapshot import CatalogSnapshot
    from service.planning.offline import PlainSettings
    from service.planning.schemas import PlanSettings

_DTYPE_ALIASES = {"auto": None, "half": "float16", "fp16": "float16", "bf16": "bfloat16"}


_FEATURE_FIELDS = (
    "speculative_config",
    "cpu_offload_gb",
    "kv_transfer_config",
    "kv_offloading_size",
    "shared_prefix_tokens",
    "limit_mm_per_prompt",
    "mm_processor_kwargs",
)
# ``flashinfer_sampler``: only ``false`` asks for something (the default is FlashInfer installed).


def _features_off(settings: PlanSettings | PlainSettings) -> bool:
    """No serving feature asked for (``false``, ``1`` and ``0`` GiB ask for nothing either)."""
    return (
        all(getattr(settings, name) is None for name in _FEATURE_FIELDS)
        and not settings.enable_lora
        and not settings.enable_expert_parallel
        and (settings.data_parallel_size or 1) == 1
        and settings.flashinfer_sampler is not False
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


def serving_features(
    settings: PlanSettings | PlainSettings, snapshot: CatalogSnapshot | None
) -> ServingFeatures | None:
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
            from service.catalog.snapshot import CatalogSnapshot
            from service.planning.service import (
                resolve_model_ref,  # the draft: an inline model needs the schemas
            )

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
        flashinfer_sampler=settings.flashinfer_sampler is not False,
    )


def _multimodal(settings: PlanSettings | PlainSettings) -> MultimodalConfig | None:
    limits, kwargs = settings.limit_mm_per_prompt, settings.mm_processor_kwargs
    if limits is None and kwargs is None:
        return None
    max_pixels = (kwargs or {}).get("max_pixels")
    if max_pixels is not None and (
        isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or not 1 <= max_pixels <= 2**40
    ):
        raise Unprocessable.for_field("mm_processor_kwargs.max_pixels", "must be a positive integer")
    return MultimodalConfig(limit_mm_per_prompt=tuple(sorted((limits or {}).items())), max_pixels=max_pixels)


def pipeline_stage_gpus(
    settings: PlanSettings | PlainSettings, snapshot: CatalogSnapshot | None
) -> tuple[GpuSpec, ...] | None:
    """``pipeline_stage_gpus`` resolved like ``gpu`` (catalog names or inline GPUs); an unknown name is a 422
    naming its entry (``pipeline_stage_gpus[1]``)."""
    refs = settings.pipeline_stage_gpus
    if refs is None:
        return None
    from service.catalog.snapshot import CatalogSnapshot
    from service.planning.service import resolve_gpu_ref  # an inline GPU needs the schemas

    catalog = snapshot if snapshot is not None else CatalogSnapshot.build((), (), source="inline")
    specs = []
    for index, ref in enumerate(refs):
        spec, _ = resolve_gpu_ref(catalog, ref, field=f"pipeline_stage_gpus[{index}]")
        assert spec is not None  # a reference was given
        specs.append(spec)
    return tuple(specs)


def build_request(
    model: ModelSpec,
    gpu: GpuSpec | None,
    settings: PlanSettings | PlainSettings,
    *,
    implied_quantization: str | None = None,
    snapshot: CatalogSnapshot | None = None,
    **extra: Any,
) -> PlanRequest:
    dtype = _DTYPE_ALIASES.get(settings.dtype, settings.dtype) if settings.dtype else None
    auto = settings.max_model_len == "auto"
    stage_gpus = pipeline_stage_gpus(settings, snapshot)
    partition = settings.pipeline_layer_partition
    return PlanRequest(
        model=model,
        gpu=gpu if gpu is not None or not stage_gpus else stage_gpus[0],
        engine=settings.engine,
        tensor_parallel_size=settings.tensor_parallel_size,
        pipeline_parallel_size=settings.pipeline_parallel_size,
        pipeline_layer_partition=tuple(partition) if partition is not None else None,
        pipeline_stage_gpus=stage_gpus,
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
        enable_prefix_caching=settings.enable_prefix_caching,
        enforce_eager=settings.enforce_eager,
        disable_sliding_window=settings.disable_sliding_window,
        async_scheduling=settings.async_scheduling,
        device=settings.device,
        mamba_cache_dtype=settings.mamba_cache_dtype,
        mamba_ssm_cache_dtype=settings.mamba_ssm_cache_dtype,
        cpu_avx512_bf16=settings.cpu_avx512_bf16,
        features=serving_features(settings, snapshot),
        **extra,
    )
