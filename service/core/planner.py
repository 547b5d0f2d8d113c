"""The capacity plan: what vLLM will allocate for a model on a GPU, and whether it will start.

Reads like the seed article, one term at a time::

    budget      = ceil(total × gpu_memory_utilization)              (per GPU; the float before 0.15)
    available   = budget − weights − activation peak − non-torch − CUDA graphs (0.20+)
                  (or exactly --kv-cache-memory-bytes, when given)
    num_blocks  = available // page_size // group_size               (min over pipeline stages)
    concurrency = num_blocks / blocks one max_model_len request needs
    tokens      = int(concurrency × max_model_len)                   (0.21+; blocks // groups × block before)

and then vLLM's start-up checks: weights must fit, some memory must be left for blocks, and one request of
``max_model_len`` tokens must fit (otherwise vLLM refuses and names the largest length that would).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field, fields, replace

from service.core.bounds import check_request_ranges
from service.core.dtypes import KvCacheDtype, resolve_kv_cache_dtype
from service.core.engines import EngineProfile, resolve_engine
from service.core.errors import InvalidSpec
from service.core.kv_cache import (
    KvLayout,
    LayerKvSpec,
    SpecCounts,
    blocks_per_request,
    bytes_per_token,
    group_layers,
    kv_heads_per_rank,
    layer_spec_counts,
    num_blocks,
    unify_page_sizes,
)
from service.core.overheads import (
    DEFAULT_COEFFICIENTS,
    OverheadCoefficients,
    Overheads,
    estimate_overheads,
    nvls_fabric,
)
from service.core.specs import GpuSpec, LayerType, ModelSpec
from service.core.units import GIB, fmt_int
from service.core.weights import QuantScheme, resolve_quantization, weight_shares

DEVICES = ("cuda", "rocm", "cpu")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRequest:
    """Everything ``vllm serve`` is told that decides memory; ``None`` takes the release's default."""

    model: ModelSpec
    gpu: GpuSpec | None = None
    engine: str | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
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
    enforce_eager: bool = False
    async_scheduling: bool | None = None
    device: str = "cuda"
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    coefficients: OverheadCoefficients = DEFAULT_COEFFICIENTS
    suggest: bool = True
    detail: bool = (
        True  # False: verdict and numbers only (sweeps): no breakdown, no length search when it fits
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedSettings:
    engine: str
    profile: str
    device: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    kv_cache_dtype: str
    kv_cache_element_bytes: int
    quantization: str | None
    dtype: str
    gpu_memory_utilization: float | None
    kv_cache_memory_bytes: int | None
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    enforce_eager: bool
    async_scheduling: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class KvCacheResult:
    bytes_per_token: int  # summed over the rank's layers (the seed's "KV bytes per token")
    bytes_per_block: int  # one block id across the pool: page × group_size
    page_size_bytes: int
    block_size: int
    num_gpu_blocks: int  # as vLLM reports it (null block included)
    usable_blocks: int
    kv_cache_size_tokens: int
    max_concurrency: float
    max_concurrent_sequences: int  # whole requests of max_model_len that fit (floor of max_concurrency)
    blocks_per_request: int
    bytes_per_sequence: int  # bytes_per_token × max_model_len (no paging)
    bytes_for_max_num_seqs: int
    num_groups: int
    group_size: int
    padding_layers: int
    num_gpu_blocks_low: int
    num_gpu_blocks_high: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryResult:
    """Per GPU (the most constrained pipeline stage)."""

    total_bytes: int
    budget_bytes: int
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    kv_cache_bytes: int  # available for the KV cache
    kv_cache_used_bytes: int  # num_gpu_blocks × bytes_per_block
    kv_cache_bytes_low: int
    kv_cache_bytes_high: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    level: str  # error | warning | info
    code: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Suggestion:
    setting: str
    value: int | float | str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Term:
    name: str
    formula: str
    value: float
    unit: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StageResult:
    stage: int
    layers: tuple[int, int]
    weights_bytes: int
    kv_cache_bytes: int
    num_gpu_blocks: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Projections:
    """Why the cache exists: K/V projections per layer with and without reuse (seed article)."""

    prompt_tokens: int
    output_tokens: int
    without_cache_per_layer: int
    with_cache_per_layer: int
    ratio: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityPlan:
    settings: ResolvedSettings
    kv_cache: KvCacheResult
    memory: MemoryResult
    fits: bool
    max_model_len_that_fits: int
    messages: tuple[Message, ...]
    suggestions: tuple[Suggestion, ...]
    breakdown: tuple[Term, ...]
    stages: tuple[StageResult, ...]
    projections: Projections | None = None
    exact: bool = False  # block counts are exact (the KV budget was given, not estimated)
    # For follow-up questions ("how many requests of N tokens fit?"); not part of the API response.
    layout: KvLayout | None = field(default=None, repr=False, compare=False)
    in_flight_tokens: int = 0
    state_pages: int = 1

    def concurrency_at(self, context_tokens: int) -> float:
        """Requests of ``context_tokens`` tokens the cache holds at once (vLLM's concurrency formula)."""
        if self.layout is None or context_tokens < 1 or self.kv_cache.num_gpu_blocks <= 0:
            return 0.0
        needed = blocks_per_request(
            self.layout,
            max_model_len=context_tokens,
            in_flight_tokens=self.in_flight_tokens,
            state_pages=self.state_pages,
        )
        return self.kv_cache.num_gpu_blocks / needed if needed else 0.0

    @property
    def errors(self) -> tuple[Message, ...]:
        return tuple(m for m in self.messages if m.level == "error")


def projection_counts(prompt_tokens: int, output_tokens: int) -> Projections:
    """K/V projections per layer for ``output_tokens`` steps after a ``prompt_tokens`` prompt.

    Without a cache step t recomputes the whole prefix (prompt + t tokens): Σ_{t=0}^{n−1} (p + t). With a
    cache the prompt is projected once and each new token once: p + (n − 1). Seed: p = 5, n = 64 → 2,336 vs 68.
    """
    if prompt_tokens < 1 or output_tokens < 1:
        raise InvalidSpec("prompt_tokens and output_tokens must be ≥ 1", field="prompt_tokens")
    n, p = output_tokens, prompt_tokens
    without = n * p + n * (n - 1) // 2
    with_cache = p + n - 1
    return Projections(
        prompt_tokens=p,
        output_tokens=n,
        without_cache_per_layer=without,
        with_cache_per_layer=with_cache,
        ratio=without / with_cache,
    )


def with_changes(request: PlanRequest, **changes: object) -> PlanRequest:
    """``dataclasses.replace`` for ``PlanRequest`` without re-running ``__init__`` (sweeps make thousands).

    ``PlanRequest`` has no ``__post_init__``, so filling a new instance's slots directly gives the same value
    several times faster than ``replace`` or ``copy.copy`` (both go through the dataclass machinery): one
    C-level read of every field, then one write per slot.
    """
    if not changes.keys() <= _PLAN_REQUEST_FIELD_SET:
        raise TypeError(f"PlanRequest has no field(s) {sorted(set(changes) - _PLAN_REQUEST_FIELD_SET)}")
    clone = object.__new__(PlanRequest)
    for name, value in zip(_PLAN_REQUEST_FIELDS, _read_fields(request), strict=True):
        _set(clone, name, changes.get(name, value))
    return clone


_PLAN_REQUEST_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PlanRequest))
_PLAN_REQUEST_FIELD_SET: frozenset[str] = frozenset(_PLAN_REQUEST_FIELDS)
_read_fields = operator.attrgetter(*_PLAN_REQUEST_FIELDS)
_set = object.__setattr__


# --- defaults ------------------------------------------------------------------------------------------------


def _is_blackwell(gpu: GpuSpec | None) -> bool:
    return bool(gpu and gpu.compute_capability and gpu.compute_capability.split(".")[0] in ("10", "11", "12"))


def _is_datacenter_blackwell(gpu: GpuSpec | None) -> bool:
    """SM 10.x (B200, GB200): vLLM's ``is_device_capability_family(100)`` (larger CUDA-graph ceiling, 0.28+)."""
    return bool(gpu and gpu.compute_capability and gpu.compute_capability.split(".")[0] == "10")


def _is_hopper(gpu: GpuSpec | None) -> bool:
    return bool(gpu and gpu.compute_capability and gpu.compute_capability.startswith("9."))


def default_block_size(model: ModelSpec, engine: EngineProfile, gpu: GpuSpec | None, device: str) -> int:
    """16 on GPUs; 128 on the CPU backend (0.12+); MLA backends: FlashMLA 64 (Hopper), CUTLASS 128 (Blackwell)."""
    if device == "cpu":
        # The CPU backend's reference MLA kernel takes 16-token blocks (recorded with vLLM 0.32 on CPU).
        if model.uses_mla and engine.version is not None and engine.version >= (0, 32):
            return 16
        return 128 if engine.version is None or engine.version >= (0, 12) else 16
    if model.uses_mla and engine.overheads:
        if _is_blackwell(gpu):
            return 128
        if engine.version is not None and engine.version < (0, 19):
            return 64  # FlashMLA was forced for MLA before 0.19
        return 64 if _is_hopper(gpu) else 16
    return 16


def batch_defaults(
    engine: EngineProfile, gpu: GpuSpec | None, device: str, world_size: int
) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) for ``vllm serve`` (``EngineArgs.get_batch_defaults``).

    H100/H200-class GPUs (≥ 70 GiB, not A100) get 1024 sequences / 8192 tokens; ≥ 160 GiB (B200, 0.28+) 1024 /
    16384; everything else 256 / 2048. V0 used 256 sequences. CPU: 128 × world / 2048 × world.
    """
    if device == "cpu":
        return 128 * world_size, 2048 * world_size
    if engine.v0:
        return 256, 2048
    memory_gib = gpu.memory_bytes / GIB if gpu else 0
    if engine.large_gpu_batch_tier and memory_gib >= 160:
        return 1024, 16384
    if memory_gib >= 70 and not (gpu and "a100" in gpu.name.lower()):
        return 1024, 8192
    return 256, 2048


def _in_flight_tokens(engine: EngineProfile, *, mnbt: int, async_scheduling: bool, pp: int) -> int:
    """Tokens a sliding-window layer must keep beyond its window (``max_in_flight_tokens``, 0.28+)."""
    if engine.in_flight_batches_async == 1:
        return mnbt
    if async_scheduling:
        batches = (
            pp + 1 if engine.version is not None and engine.version >= (0, 30) else (2 if pp == 1 else pp)
        )
    else:
        batches = pp
    return batches * mnbt


# --- per-stage layout ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Stage:
    index: int
    layers: tuple[int, int]
    specs: SpecCounts  # distinct layer specs on this stage's GPU, with how many layers use each
    layout: KvLayout
    weights_bytes: int
    overheads: Overheads
    available: int
    available_low: int
    available_high: int
    notes: tuple[str, ...] = field(default=())


def _as_full(counts: SpecCounts, kinds: frozenset[LayerType]) -> SpecCounts:
    """Charge layers of ``kinds`` as full attention (their window limits attention, not memory)."""
    merged: dict[LayerKvSpec, int] = {}
    for spec, count in counts:
        if spec.kind in kinds:
            spec = replace(spec, kind=LayerType.FULL, window_tokens=None)
        merged[spec] = merged.get(spec, 0) + count
    return list(merged.items())


def _stage_specs(
    model: ModelSpec,
    engine: EngineProfile,
    kv_dtype: KvCacheDtype,
    block_size: int,
    tp: int,
    layers: range,
    dtype: str,
) -> tuple[SpecCounts, list[str]]:
    notes: list[str] = []
    counts: SpecCounts = list(
        layer_spec_counts(
            model,
            kv_dtype=kv_dtype,
            block_size=block_size,
            tensor_parallel_size=tp,
            layers=layers,
            model_dtype=dtype,
        )
    )
    present = {spec.kind for spec, _ in counts}
    if engine.v0:
        if present & {LayerType.SLIDING, LayerType.CHUNKED}:
            # V0 paged every attention layer the same way: a sliding window limits attention, not memory.
            counts = _as_full(counts, frozenset({LayerType.SLIDING, LayerType.CHUNKED}))
            notes.append("V0 engine: sliding-window layers are charged as full attention")
        counts = [(spec, n) for spec, n in counts if not spec.is_state]
    elif engine.chunked_local_as_full and LayerType.CHUNKED in present:
        counts = _as_full(counts, frozenset({LayerType.CHUNKED}))
        notes.append(
            "chunked local attention is charged as full attention (hybrid KV manager off by default before 0.15)"
        )
    return counts, notes


def _unify_attention_pages(counts: SpecCounts) -> tuple[SpecCounts, str]:
    """Raise smaller attention pages to the largest by multiplying their block size (``unify_kv_cache_spec_page_size``)."""
    pages = {s.page_size_bytes for s, _ in counts}
    if len(pages) <= 1:
        return counts, ""
    largest = max(pages)
    unified: SpecCounts = []
    for spec, n in counts:
        if spec.page_size_bytes == largest:
            unified.append((spec, n))
            continue
        if largest % spec.page_size_bytes:
            raise InvalidSpec(
                "The page size of the layer is not divisible by the maximum page size. Cannot unify by adjusting block_size.",
                field="model",
            )
        unified.append((replace(spec, block_size=spec.block_size * (largest // spec.page_size_bytes)), n))
    return unified, "layers with smaller pages get proportionally larger blocks so all pages are equal"


# --- the plan ------------------------------------------------------------------------------------------------


def plan(request: PlanRequest) -> CapacityPlan:
    model, gpu = request.model, request.gpu
    engine = resolve_engine(request.engine)
    tp, pp = request.tensor_parallel_size, request.pipeline_parallel_size
    messages: list[Message] = []
    terms: list[Term] = []

    # 1. Inputs vLLM rejects outright ---------------------------------------------------------------------
    if tp < 1:
        raise InvalidSpec("must be ≥ 1", field="tensor_parallel_size")
    if pp < 1:
        raise InvalidSpec("must be ≥ 1", field="pipeline_parallel_size")
    if request.device not in DEVICES:
        raise InvalidSpec(f"must be one of {', '.join(DEVICES)}", field="device")
    if gpu is None and request.kv_cache_memory_bytes is None:
        raise InvalidSpec("is required unless kv_cache_memory_bytes is given", field="gpu")
    util = request.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise InvalidSpec(f"must be in (0, 1], got {util}", field="gpu_memory_utilization")
    if request.kv_cache_memory_bytes is not None:
        if request.kv_cache_memory_bytes < 0:
            raise InvalidSpec("must not be negative", field="kv_cache_memory_bytes")
        if not engine.kv_cache_memory_bytes:
            raise InvalidSpec(
                f"--kv-cache-memory-bytes does not exist in {engine.engine} (added in 0.11)",
                field="kv_cache_memory_bytes",
            )
    if request.max_model_len_auto and not engine.max_model_len_auto:
        raise InvalidSpec(
            f"--max-model-len auto does not exist in {engine.engine} (added in 0.15)", field="max_model_len"
        )
    for name in (
        "max_model_len",
        "block_size",
        "max_num_seqs",
        "max_num_batched_tokens",
        "num_gpu_blocks_override",
    ):
        value = getattr(request, name)
        if value is not None and value < 1:
            raise InvalidSpec("must be ≥ 1", field=name)
    check_request_ranges(request)
    kv_name = request.kv_cache_dtype
    if kv_name is not None and kv_name.strip().lower() == "int8" and engine.overheads:
        if not engine.per_token_head_kv:
            raise InvalidSpec(
                f"int8 KV cache is not available in {engine.engine} (int8_per_token_head from 0.20)",
                field="kv_cache_dtype",
            )
        kv_name = "int8_per_token_head"
        messages.append(
            Message(
                level="info",
                code="kv_dtype_alias",
                text="int8 KV cache means vLLM's int8_per_token_head (1 byte + fp32 scales per head)",
            )
        )
    kv_dtype = resolve_kv_cache_dtype(kv_name)
    if kv_dtype.scale_bytes_per_head and not engine.per_token_head_kv:
        raise InvalidSpec(
            f"{kv_dtype.name} does not exist in {engine.engine} (added in 0.20)", field="kv_cache_dtype"
        )
    if (
        kv_dtype.name.startswith("fp8")
        and gpu is not None
        and not gpu.supports_fp8
        and request.device != "cpu"
    ):
        messages.append(
            Message(
                level="warning",
                code="fp8_kv_unsupported",
                text=f"{gpu.name} does not list an fp8 KV cache; vLLM may refuse or emulate it",
            )
        )
    quant: QuantScheme | None = resolve_quantization(request.quantization, native=model.quantization)
    dtype = request.dtype or model.torch_dtype
    if gpu is not None and not gpu.supports_bf16 and dtype == "bfloat16" and request.device != "cpu":
        dtype = "float16"
        messages.append(
            Message(
                level="info",
                code="dtype_cast",
                text=f"{gpu.name} has no bfloat16: vLLM casts the model to float16",
            )
        )

    if model.num_attention_heads % tp:
        messages.append(
            Message(
                level="error",
                code="tp_heads",
                text=f"Total number of attention heads ({model.num_attention_heads}) must be divisible by tensor parallel size ({tp}).",
            )
        )
    kv_total = model.num_key_value_heads
    if not model.uses_mla and ((tp >= kv_total and tp % kv_total) or (tp < kv_total and kv_total % tp)):
        messages.append(
            Message(
                level="error",
                code="tp_kv_heads",
                text=f"{kv_total} KV heads cannot be split evenly over tensor parallel size {tp}.",
            )
        )
    if not model.uses_mla and tp > kv_total:
        messages.append(
            Message(
                level="warning",
                code="kv_head_replication",
                text=(
                    f"tensor-parallel-size {tp} exceeds the model's {kv_total} KV heads: each GPU stores {kv_heads_per_rank(kv_total, tp)} "
                    "replicated head(s), so per-GPU KV memory no longer shrinks with TP"
                ),
            )
        )

    derived_len = model.max_model_len or model.max_position_embeddings
    if request.max_model_len is None and derived_len is None:
        raise InvalidSpec(
            "the model has no default context length; give max_model_len", field="max_model_len"
        )
    max_len = request.max_model_len or derived_len or 0
    if derived_len and request.max_model_len and request.max_model_len > derived_len:
        messages.append(
            Message(
                level="error",
                code="max_model_len_over_derived",
                text=(
                    f"User-specified max_model_len ({fmt_int(request.max_model_len)}) is greater than the derived max_model_len "
                    f"({fmt_int(derived_len)}) of the model's config.json; vLLM refuses unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
                ),
            )
        )

    # 2. Defaults for this release and GPU -----------------------------------------------------------------
    default_mns, default_mnbt = batch_defaults(engine, gpu, request.device, tp * pp)
    mns = request.max_num_seqs or default_mns
    if request.max_num_batched_tokens is not None:
        mnbt = request.max_num_batched_tokens
    elif engine.v0:
        mnbt = 2048 if max_len > 32768 else max(max_len, 2048)
    else:
        mnbt = min(default_mnbt, mns * max_len)
    if request.max_num_seqs is None:
        mns = min(mns, mnbt)
    util_value = util if util is not None else engine.default_gpu_memory_utilization
    block_size = request.block_size or default_block_size(model, engine, gpu, request.device)
    async_scheduling = (
        request.async_scheduling
        if request.async_scheduling is not None
        else (request.device != "cpu" and engine.version is not None and engine.version >= (0, 15))
    )
    exact = request.kv_cache_memory_bytes is not None or request.num_gpu_blocks_override is not None

    # 3. Per pipeline stage: weights, overheads, layer pages, groups, blocks -------------------------------
    shares = weight_shares(
        model,
        quantization=quant,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        dtype=dtype,
        compute_capability=gpu.compute_capability if gpu else None,
    )
    stages: list[_Stage] = []
    total = gpu.memory_bytes if gpu else 0
    budget = math.ceil(total * util_value) if engine.ceil_requested else total * util_value
    notes: list[str] = []
    for share in shares:
        specs, stage_notes = _stage_specs(
            model, engine, kv_dtype, block_size, tp, range(*share.layers), dtype
        )
        if any(s.is_state for s, _ in specs) and any(not s.is_state for s, _ in specs):
            specs, raised_block, note = unify_page_sizes(specs)
            if raised_block != block_size:
                block_size = raised_block
                stage_notes.append(note)
        specs, note = _unify_attention_pages(specs)
        if note:
            stage_notes.append(note)
        # Before 0.12 the smallest bucket always set the group size (a ratio of 1 never picks the largest).
        layout = group_layers(tuple(specs), uniform_ratio=engine.group_size_ratio or 1.0)
        overheads = estimate_overheads(
            model,
            engine=engine,
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            layers_on_rank=share.layers[1] - share.layers[0],
            last_stage=share.stage == len(shares) - 1,
            max_num_seqs=mns,
            max_num_batched_tokens=mnbt,
            enforce_eager=request.enforce_eager or request.device == "cpu",
            dtype=dtype,
            blackwell=_is_datacenter_blackwell(gpu),
            nvls=gpu is not None
            and nvls_fabric(gpu.compute_capability, gpu.interconnect_bandwidth_bytes_per_second),
            quantization=quant.name if quant else None,
            coefficients=request.coefficients,
        )
        if request.kv_cache_memory_bytes is not None:
            available = low = high = request.kv_cache_memory_bytes
        else:
            free = budget - share.total_bytes
            available = int(free - overheads.total_bytes)
            low = int(free - overheads.high_bytes)
            high = int(free - overheads.low_bytes)
        stages.append(
            _Stage(
                share.stage,
                share.layers,
                specs,
                layout,
                share.total_bytes,
                overheads,
                available,
                low,
                high,
                tuple(stage_notes),
            )
        )
        notes.extend(n for n in stage_notes if n not in notes)
    for note in notes:
        messages.append(Message(level="info", code="layout", text=note))

    def stage_blocks(stage: _Stage, available: int) -> int:
        if request.num_gpu_blocks_override is not None:
            return request.num_gpu_blocks_override
        return num_blocks(available, stage.layout)

    blocks = min(stage_blocks(s, s.available) for s in stages)
    if request.detail:
        blocks_low = min(stage_blocks(s, s.available_low) for s in stages)
        blocks_high = min(stage_blocks(s, s.available_high) for s in stages)
    else:  # verdict-only plans (sweeps) do not report the band
        blocks_low = blocks_high = blocks
    worst = stages[0] if len(stages) == 1 else min(stages, key=lambda s: stage_blocks(s, s.available))
    layout = stages[0].layout
    for stage in stages:
        if len(stage.layout.notes) and stage is stages[0]:
            for padding_note in stage.layout.notes:
                messages.append(Message(level="warning", code="padding_layers", text=padding_note))

    # 4. Concurrency and the logged token count -------------------------------------------------------------
    in_flight = _in_flight_tokens(engine, mnbt=mnbt, async_scheduling=async_scheduling, pp=pp)
    state_pages = 2 if engine.mamba_align else 1

    def per_request(length: int, lay: KvLayout = layout) -> int:
        return blocks_per_request(
            lay, max_model_len=length, in_flight_tokens=in_flight, state_pages=state_pages
        )

    def needed_bytes(stage: _Stage, length: int) -> int:
        """Bytes vLLM's start-up check demands for one request of ``length`` tokens (per release)."""
        lay = stage.layout
        if engine.refusal_per_layer:
            return sum(
                s.max_blocks_per_request(
                    max_model_len=length, in_flight_tokens=in_flight, state_pages=state_pages
                )
                * s.page_size_bytes
                * n
                for s, n in stage.specs
            )
        if engine.refusal_counts_first_group_only:
            first = lay.groups[0].spec
            return (
                lay.group_size
                * lay.page_size_bytes
                * first.max_blocks_per_request(
                    max_model_len=length, in_flight_tokens=in_flight, state_pages=state_pages
                )
            )
        return lay.bytes_per_block * per_request(length, lay)

    def check_available(stage: _Stage) -> int:
        available = stage.available
        if (
            request.num_gpu_blocks_override is not None
            and engine.version is not None
            and engine.version >= (0, 21)
        ):
            available = request.num_gpu_blocks_override * stage.layout.bytes_per_block
        if engine.null_block_in_checks:
            available -= stage.layout.bytes_per_block
        return available

    def fits_length(length: int) -> bool:
        if engine.v0:
            return length <= block_size * (blocks // pp)
        return all(needed_bytes(s, length) <= check_available(s) for s in stages)

    def largest_fitting(limit: int) -> int:
        if limit < 1 or not fits_length(1):
            return 0
        lo, hi = 1, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits_length(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    search_limit = derived_len or max_len
    requested_fits = bool(blocks > 0 and max_len and fits_length(max_len))
    # The largest length that fits is a search; verdict-only plans (sweeps) skip it unless it decides the length.
    if request.detail or request.max_model_len_auto:
        max_len_fits = largest_fitting(search_limit)
    else:
        max_len_fits = max_len if requested_fits else 0
    if request.max_model_len_auto:
        if max_len_fits == 0:
            messages.append(
                Message(
                    level="error",
                    code="auto_fit_failed",
                    text="Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. Try increasing `gpu_memory_utilization`.",
                )
            )
        else:
            verb = "full model context length" if max_len_fits == search_limit else "reduced"
            messages.append(
                Message(
                    level="info",
                    code="auto_fit",
                    text=f"Auto-fit max_model_len: {verb} {fmt_int(max_len_fits)}",
                )
            )
            max_len = max_len_fits

    request_blocks = per_request(max_len) if max_len else 0
    if engine.v0:
        concurrency = blocks * block_size / max_len if max_len else 0.0
    else:
        concurrency = blocks / request_blocks if request_blocks else 0.0
    if engine.v0:
        kv_tokens = blocks * block_size
    elif engine.tokens_from_concurrency:
        kv_tokens = int(concurrency * max_len)
    else:
        kv_tokens = blocks // len(layout.groups) * min(g.spec.block_size for g in layout.groups)
    per_token = bytes_per_token(worst.specs)

    # 5. vLLM's start-up checks ----------------------------------------------------------------------------
    # Under pipeline parallelism the stage with the most weights is not always the one with the fewest blocks.
    heaviest = worst if len(stages) == 1 else max(stages, key=lambda s: s.weights_bytes)
    if gpu is not None and request.kv_cache_memory_bytes is None:
        if heaviest.weights_bytes >= total:
            messages.append(
                Message(
                    level="error",
                    code="weights_exceed_gpu",
                    text=(
                        f"Model weights need {gib(heaviest.weights_bytes)} GiB per GPU but the GPU has {gib(total)} GiB: loading fails "
                        "with CUDA out of memory."
                    ),
                )
            )
        elif worst.available <= 0:
            messages.append(
                Message(
                    level="error",
                    code="no_memory_for_blocks",
                    text=(
                        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine. "
                        f"(budget {gib(budget)} GiB − weights {gib(worst.weights_bytes)} GiB − runtime {gib(worst.overheads.total_bytes)} GiB = "
                        f"{gib(worst.available)} GiB)"
                    ),
                )
            )
    elif (
        gpu is not None
        and request.kv_cache_memory_bytes is not None
        and heaviest.weights_bytes + request.kv_cache_memory_bytes > total
    ):
        messages.append(
            Message(
                level="error",
                code="kv_bytes_exceed_gpu",
                text=(
                    f"weights ({gib(heaviest.weights_bytes)} GiB) + kv_cache_memory_bytes ({gib(request.kv_cache_memory_bytes)} GiB) exceed "
                    f"the GPU's {gib(total)} GiB"
                ),
            )
        )
    if blocks <= 0 and not any(m.code in ("weights_exceed_gpu", "no_memory_for_blocks") for m in messages):
        messages.append(
            Message(
                level="error",
                code="no_memory_for_blocks",
                text="No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
            )
        )
    if blocks > 0 and max_len and not requested_fits and not request.max_model_len_auto:
        messages.append(
            Message(
                level="error",
                code="max_model_len_too_large",
                text=_max_len_message(
                    engine,
                    max_len,
                    max_len_fits,
                    needed_bytes(worst, max_len),
                    check_available(worst),
                    block_size * (blocks // pp),
                ),
            )
        )

    fits = not any(m.level == "error" for m in messages)

    elem = kv_dtype.bytes_per_element(dtype)
    suggestions = (
        _suggestions(request, engine, fits, max_len, max_len_fits, kv_dtype)
        if request.suggest and not fits
        else ()
    )

    if request.detail:
        # 6. Facts a user reads next to the verdict --------------------------------------------------------------
        device_word = "CPU" if request.device == "cpu" else "GPU"
        if blocks > 0 and max_len:
            if engine.v0:
                log = f"# {'cpu' if request.device == 'cpu' else 'cuda'} blocks: {blocks}, then Maximum concurrency for {max_len} tokens per request: {concurrency:.2f}x"
            else:
                log = f"{device_word} KV cache size: {fmt_int(kv_tokens)} tokens, Maximum concurrency for {fmt_int(max_len)} tokens per request: {concurrency:.2f}x"
            messages.append(Message(level="info", code="expected_log", text=f"vLLM should log: {log}"))
        if gpu is not None and request.kv_cache_memory_bytes is None and engine.overheads:
            spread = (blocks_high - blocks_low) / 2
            messages.append(
                Message(
                    level="info",
                    code="estimate_band",
                    text=(
                        f"runtime overheads are estimated: num_gpu_blocks likely between {fmt_int(blocks_low)} and {fmt_int(blocks_high)} "
                        f"(±{spread:,.0f}); give kv_cache_memory_bytes for an exact count"
                    ),
                )
            )

        # 7. The breakdown, term by term -----------------------------------------------------------------------
        attention_layers = sum(n for s, n in worst.specs if not s.is_state)
        terms.append(
            Term(
                name="kv_bytes_per_token",
                formula=f"Σ layers kv_heads_per_rank × 2 (K,V) × head_dim × {elem} B ({attention_layers} layers with KV)",
                value=per_token,
                unit="bytes",
            )
        )
        terms.append(
            Term(
                name="page_size",
                formula=f"block_size {block_size} × per-layer bytes per token",
                value=layout.page_size_bytes,
                unit="bytes",
            )
        )
        terms.append(
            Term(
                name="bytes_per_block",
                formula=f"page_size × group_size {layout.group_size} ({len(layout.groups)} group(s))",
                value=layout.bytes_per_block,
                unit="bytes",
            )
        )
        if request.kv_cache_memory_bytes is None and gpu is not None:
            terms.append(
                Term(
                    name="budget",
                    formula=f"{'ceil(' if engine.ceil_requested else ''}total {gib(total)} GiB × gpu_memory_utilization {util_value}{')' if engine.ceil_requested else ''}",
                    value=budget,
                    unit="bytes",
                )
            )
            terms.append(
                Term(
                    name="weights",
                    formula=f"parameters on this GPU × bytes per parameter ({quant.name + ' linear layers' if quant else dtype})",
                    value=worst.weights_bytes,
                    unit="bytes",
                )
            )
            terms.append(
                Term(
                    name="activation_peak",
                    formula=worst.overheads.activation.formula,
                    value=worst.overheads.activation.bytes,
                    unit="bytes",
                )
            )
            terms.append(
                Term(
                    name="non_torch",
                    formula=worst.overheads.non_torch.formula,
                    value=worst.overheads.non_torch.bytes,
                    unit="bytes",
                )
            )
            terms.append(
                Term(
                    name="cudagraph",
                    formula=worst.overheads.cudagraph.formula,
                    value=worst.overheads.cudagraph.bytes,
                    unit="bytes",
                )
            )
            terms.append(
                Term(
                    name="kv_cache_memory",
                    formula="budget − weights − activation_peak − non_torch − cudagraph",
                    value=worst.available,
                    unit="bytes",
                )
            )
        else:
            terms.append(
                Term(
                    name="kv_cache_memory",
                    formula="kv_cache_memory_bytes as given (profiling skipped, utilisation ignored)",
                    value=worst.available,
                    unit="bytes",
                )
            )
        terms.append(
            Term(
                name="num_gpu_blocks",
                formula="kv_cache_memory // page_size // group_size"
                + (" (min over pipeline stages)" if pp > 1 else ""),
                value=blocks,
                unit="blocks",
            )
        )
        terms.append(
            Term(
                name="blocks_per_request",
                formula=f"Σ groups blocks for {fmt_int(max_len)} tokens (full: cdiv(len, block); sliding: cdiv(min(window−1+{fmt_int(in_flight)}, len), block)+1)",
                value=request_blocks,
                unit="blocks",
            )
        )
        terms.append(
            Term(
                name="max_concurrency",
                formula="num_gpu_blocks × block_size / max_model_len"
                if engine.v0
                else "num_gpu_blocks / blocks_per_request",
                value=round(concurrency, 4),
                unit="requests",
            )
        )
        terms.append(
            Term(
                name="kv_cache_size_tokens",
                formula="int(max_concurrency × max_model_len)"
                if engine.tokens_from_concurrency and not engine.v0
                else "num_gpu_blocks // groups × block_size",
                value=kv_tokens,
                unit="tokens",
            )
        )

    projections = (
        projection_counts(request.prompt_tokens, request.output_tokens)
        if request.prompt_tokens and request.output_tokens
        else None
    )
    used = blocks * layout.bytes_per_block
    return CapacityPlan(
        settings=ResolvedSettings(
            engine=engine.engine,
            profile=engine.profile,
            device=request.device,
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            max_model_len=max_len,
            kv_cache_dtype=kv_dtype.name,
            kv_cache_element_bytes=elem,
            quantization=quant.name if quant else None,
            dtype=dtype,
            gpu_memory_utilization=None if request.kv_cache_memory_bytes is not None else util_value,
            kv_cache_memory_bytes=request.kv_cache_memory_bytes,
            block_size=block_size,
            max_num_seqs=mns,
            max_num_batched_tokens=mnbt,
            enforce_eager=request.enforce_eager,
            async_scheduling=async_scheduling,
        ),
        kv_cache=KvCacheResult(
            bytes_per_token=per_token,
            bytes_per_block=layout.bytes_per_block,
            page_size_bytes=layout.page_size_bytes,
            block_size=block_size,
            num_gpu_blocks=max(blocks, 0),
            usable_blocks=max(blocks - (0 if engine.profile == "ideal" else 1), 0),
            kv_cache_size_tokens=max(kv_tokens, 0),
            max_concurrency=max(concurrency, 0.0),
            max_concurrent_sequences=max(math.floor(concurrency), 0),
            blocks_per_request=request_blocks,
            bytes_per_sequence=per_token * max_len,
            bytes_for_max_num_seqs=per_token * max_len * mns,
            num_groups=len(layout.groups),
            group_size=layout.group_size,
            padding_layers=layout.padding_layers,
            num_gpu_blocks_low=max(blocks_low, 0),
            num_gpu_blocks_high=max(blocks_high, 0),
        ),
        memory=MemoryResult(
            total_bytes=total,
            budget_bytes=int(budget) if request.kv_cache_memory_bytes is None else 0,
            weights_bytes=worst.weights_bytes,
            activation_bytes=worst.overheads.activation.bytes if request.kv_cache_memory_bytes is None else 0,
            non_torch_bytes=worst.overheads.non_torch.bytes if request.kv_cache_memory_bytes is None else 0,
            cudagraph_bytes=worst.overheads.cudagraph.bytes if request.kv_cache_memory_bytes is None else 0,
            kv_cache_bytes=worst.available,
            kv_cache_used_bytes=used,
            kv_cache_bytes_low=worst.available_low,
            kv_cache_bytes_high=worst.available_high,
        ),
        fits=fits,
        max_model_len_that_fits=max_len_fits,
        messages=tuple(messages),
        suggestions=tuple(suggestions),
        breakdown=tuple(terms),
        stages=tuple(
            StageResult(
                stage=s.index,
                layers=s.layers,
                weights_bytes=s.weights_bytes,
                kv_cache_bytes=s.available,
                num_gpu_blocks=stage_blocks(s, s.available),
            )
            for s in stages
        ),
        projections=projections,
        exact=exact,
        layout=layout,
        in_flight_tokens=in_flight,
        state_pages=state_pages,
    )


def gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def _max_len_message(
    engine: EngineProfile, length: int, estimate: int, needed: int, available: int, v0_tokens: int
) -> str:
    """vLLM's refusal when one max_model_len request does not fit, in the wording of the release."""
    if engine.v0:
        return (
            f"The model's max seq len ({length}) is larger than the maximum number of tokens that can be stored in KV cache "
            f"({v0_tokens}). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    owner = "models's" if engine.message_style == "models's" else "model's"
    est = (
        f" Based on the available memory, the estimated maximum model length is {estimate}."
        if estimate > 0
        else ""
    )
    return (
        f"To serve at least one request with the {owner} max seq len ({length}), ({needed / GIB:.2f} GiB KV cache is needed, "
        f"which is larger than the available KV cache memory ({available / GIB:.2f} GiB).{est} Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    )


def _suggestions(
    request: PlanRequest,
    engine: EngineProfile,
    fits: bool,
    max_len: int,
    max_len_fits: int,
    kv_dtype: KvCacheDtype,
) -> list[Suggestion]:
    """Changes that would make the deployment start, each checked by re-planning."""
    out: list[Suggestion] = []
    if fits:
        return out

    def works(**changes: object) -> bool:
        try:
            candidate = plan(replace(request, suggest=False, **changes))  # type: ignore[arg-type]
        except InvalidSpec:
            return False
        return candidate.fits

    if 0 < max_len_fits < max_len and works(max_model_len=max_len_fits):
        out.append(
            Suggestion(
                setting="max_model_len",
                value=max_len_fits,
                text=f"set --max-model-len ≤ {fmt_int(max_len_fits)}",
            )
        )
    if (
        (kv_dtype.element_bytes is None or kv_dtype.element_bytes > 1)
        and request.device != "cpu"
        and works(kv_cache_dtype="fp8")
    ):
        out.append(Suggestion(setting="kv_cache_dtype", value="fp8", text="--kv-cache-dtype fp8"))
    for factor in (2, 4, 8):
        tp = request.tensor_parallel_size * factor
        if tp <= 64 and request.model.num_attention_heads % tp == 0 and works(tensor_parallel_size=tp):
            out.append(
                Suggestion(setting="tensor_parallel_size", value=tp, text=f"tensor-parallel-size {tp}")
            )
            break
    util = request.gpu_memory_utilization or engine.default_gpu_memory_utilization
    if request.kv_cache_memory_bytes is None and util < 0.95 and works(gpu_memory_utilization=0.95):
        out.append(
            Suggestion(setting="gpu_memory_utilization", value=0.95, text="--gpu-memory-utilization 0.95")
        )
    return out
