"""What a plan is asked: everything ``vllm serve`` is told that decides memory."""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields

from service.core.overheads import DEFAULT_COEFFICIENTS, OverheadCoefficients
from service.core.planner.features import ServingFeatures
from service.core.records import from_values, quick_init
from service.core.specs import GpuSpec, ModelSpec

DEVICES = ("cuda", "rocm", "cpu")
MAMBA_CACHE_DTYPES = (
    "auto",
    "float32",
    "bfloat16",
    "float16",
)  # --mamba-cache-dtype / --mamba-ssm-cache-dtype


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRequest:
    """Everything ``vllm serve`` is told that decides memory; ``None`` takes the release's default."""

    model: ModelSpec
    gpu: GpuSpec | None = None
    engine: str | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    pipeline_layer_partition: tuple[int, ...] | None = None  # VLLM_PP_LAYER_PARTITION: layers per stage
    # One GPU per pipeline stage when the stages run on different GPUs (each stage's budget is its GPU's
    # total × utilisation); ``gpu`` is then the first stage's, whose capability the release's checks read.
    pipeline_stage_gpus: tuple[GpuSpec, ...] | None = None
    max_model_len: int | None = None
    max_model_len_auto: bool = False
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    dtype: str | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool | None = None  # None: the release's default (V1 always; V0 above 32K tokens)
    # --[no-]enable-prefix-caching; None: the release's default (on in V1). Off, a hybrid's Mamba state keeps one
    # page per request (mamba_cache_mode "none") instead of align mode's checkpoints.
    enable_prefix_caching: bool | None = None
    enforce_eager: bool = False
    # --disable-sliding-window: every sliding layer is served as full attention, the default length capped at the
    # window (``settings.served_model``).
    disable_sliding_window: bool = False
    async_scheduling: bool | None = None
    device: str = "cuda"
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    mamba_cache_dtype: str | None = (
        None  # --mamba-cache-dtype: Mamba/linear-attention conv state (None: auto)
    )
    mamba_ssm_cache_dtype: str | None = None  # --mamba-ssm-cache-dtype: the SSM/recurrent state (None: auto)
    cpu_avx512_bf16: bool = True  # --device cpu: the host has AVX512-BF16 (Intel Cooper Lake+, AMD Zen 4+)
    coefficients: OverheadCoefficients = DEFAULT_COEFFICIENTS
    features: ServingFeatures | None = None  # speculative decoding, LoRA, offloading, DP/EP, prefix sharing
    suggest: bool = True
    detail: bool = (
        True  # False: verdict and numbers only (sweeps): no breakdown, no length search when it fits
    )


def with_changes(request: PlanRequest, **changes: object) -> PlanRequest:
    """``dataclasses.replace`` for ``PlanRequest`` without re-running ``__init__`` (sweeps make thousands).

    ``PlanRequest`` has no ``__post_init__``, so an instance built from every field's value (the request's,
    or the change's) is the value ``replace`` gives, several times faster: one C-level read of every field,
    then ``records.from_values``.
    """
    if not changes.keys() <= _PLAN_REQUEST_FIELD_SET:
        raise TypeError(f"PlanRequest has no field(s) {sorted(set(changes) - _PLAN_REQUEST_FIELD_SET)}")
    get = changes.get
    return from_values(
        PlanRequest,
        [get(name, value) for name, value in zip(_PLAN_REQUEST_FIELDS, _read_fields(request), strict=True)],
    )


_PLAN_REQUEST_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PlanRequest))
_PLAN_REQUEST_FIELD_SET: frozenset[str] = frozenset(_PLAN_REQUEST_FIELDS)
_read_fields = operator.attrgetter(*_PLAN_REQUEST_FIELDS)
