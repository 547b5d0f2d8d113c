"""What a plan answers: the settings vLLM ends up with, the cache, the memory, the verdict and its reasons."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.core.errors import InvalidSpec
from service.core.kv_cache import KvLayout, blocks_per_request
from service.core.records import quick_init
from service.core.units import GIB


@quick_init
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
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True  # as resolved: the release's default (V1 on, V0 off) unless given
    disable_sliding_window: bool = False  # --disable-sliding-window: sliding layers served as full attention
    pipeline_layer_partition: tuple[int, ...] | None = None  # VLLM_PP_LAYER_PARTITION as given
    pipeline_stage_gpus: tuple[str, ...] | None = None  # each stage's GPU, by name, when they differ


@quick_init
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


@quick_init
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


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    level: str  # error | warning | info
    code: str
    text: str


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Suggestion:
    setting: str
    value: int | float | str
    text: str


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Term:
    name: str
    formula: str
    value: float
    unit: str


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StageResult:
    stage: int
    layers: tuple[int, int]
    weights_bytes: int
    kv_cache_bytes: int
    num_gpu_blocks: int


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Projections:
    """Why the cache exists: K/V projections per layer with and without reuse (seed article)."""

    prompt_tokens: int
    output_tokens: int
    without_cache_per_layer: int
    with_cache_per_layer: int
    ratio: float


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class FeaturesResult:
    """What the serving features change (``service.core.planner.features``); per GPU unless named otherwise."""

    speculative_method: str | None
    num_speculative_tokens: int  # lookahead slots the scheduler reserves per running request
    speculative_weights_bytes: int
    speculative_kv_layers: int  # draft attention layers sharing the KV pool
    blocks_per_request_with_lookahead: int
    lora_bytes: int
    cpu_offload_bytes: int
    data_parallel_size: int
    enable_expert_parallel: bool
    experts_per_gpu: int | None
    total_gpus: int  # TP × PP × DP
    max_concurrency_all_ranks: float  # effective concurrency × DP (one KV cache per DP rank)
    cpu_kv_cache_bytes: int
    cpu_kv_cache_tokens: int
    shared_prefix_tokens: int
    effective_max_concurrency: float  # with the declared shared prefix (= max_concurrency without one)


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class SharedResults:
    """What every plan of one configuration without serving features holds, as the very same objects (computed
    once per configuration by ``pipeline.fixed_stages``): its ``memory``, its ``stages`` and the leading terms
    of its ``breakdown`` (none in a verdict-only plan). A writer may keep their serialised form by identity."""

    memory: MemoryResult
    stages: tuple[StageResult, ...]
    terms: tuple[Term, ...]


@quick_init
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
    features: FeaturesResult | None = None  # set when the request asked for serving features
    # For follow-up questions ("how many requests of N tokens fit?"); not part of the API response.
    layout: KvLayout | None = field(default=None, repr=False, compare=False)
    in_flight_tokens: int = 0
    state_pages: int = 1
    shared: SharedResults | None = field(default=None, repr=False, compare=False)  # not in the response

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


def gib(n: float) -> str:
    return f"{n / GIB:.2f}"
