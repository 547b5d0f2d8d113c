"""KV-cache pages, groups and blocks, re-derived from vLLM V1's planner.

Sources of truth: ``vllm/v1/kv_cache_interface.py`` (what one layer stores per block) and
``vllm/v1/core/kv_cache_utils.py`` (how layers are grouped, how many blocks fit, how concurrency is reported).

Per layer and block (``page_size_bytes``)::

    attention   block_size × kv_heads_per_rank × (K + V = 2 × head_dim) × dtype_bytes  (+ per-token-head scales)
    MLA         block_size × 1 latent head × (kv_lora_rank + qk_rope_head_dim) × dtype_bytes   (no V, no TP split)
    Mamba       conv state + SSM state bytes (one "block" is the whole constant state of one request)

Worked example (``vllm-kv-cache.md`` §3): Llama-3.1-8B, 8 KV heads × 128 dims, bf16, block 16 →
8 × 2 × 128 × 2 = 4 KiB per token per layer, × 32 layers = 128 KiB/token, 2 MiB per block across layers;
55 GiB → 28,160 blocks → 450,560 tokens → 28,160 / cdiv(131,072, 16) = 3.44 requests of 131,072 tokens.

Hybrid models (sliding + full attention, attention + Mamba) put layers with equal specs in buckets, cut the
buckets into groups of ``group_size`` layers (padding the last group of a bucket), and let every group draw
blocks from one shared pool of ``group_size`` tensors: ``num_blocks = available // page // group_size``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from math import prod

from service.core.dtypes import MODEL_DTYPE_BYTES, KvCacheDtype, normalize_model_dtype
from service.core.errors import InvalidSpec
from service.core.specs import LayerType, ModelSpec, StateSpec
from service.core.units import cdiv


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerKvSpec:
    """What one decoder layer keeps per block on one rank (vLLM's ``KVCacheSpec``).

    Two layers with equal specs are interchangeable for grouping, so this is a value object (hashable).
    """

    kind: LayerType
    block_size: int
    num_kv_heads: int = 0  # per rank; 1 latent head for MLA
    head_size: int = 0
    dtype_bytes: int = 0
    scale_bytes_per_head: int = 0
    window_tokens: int | None = None  # sliding window or attention chunk
    state_bytes: int = 0  # Mamba/linear: conv + SSM state of one request
    padded_state_bytes: int | None = None
    prefill_checkpoint: bool = False  # Mamba2 mixers keep one prefill checkpoint page in align mode (0.32+)
    speculative_blocks: int = 0  # Mamba state pages for the draft tokens (MambaSpec.num_speculative_blocks)
    # Derived once (specs are hashed and queried in tight loops by sweeps): see __post_init__.
    bytes_per_token: int = field(init=False, compare=False, default=0)
    page_size_bytes: int = field(init=False, compare=False, default=0)
    is_state: bool = field(init=False, compare=False, default=False)

    def __post_init__(self) -> None:
        state = self.kind.is_state
        if state:
            per_token = 0  # constant-state layers cost nothing per token
            page = self.padded_state_bytes or self.state_bytes
        elif self.kind is LayerType.MLA:
            per_token = self.num_kv_heads * self.head_size * self.dtype_bytes  # one latent, no separate V
            page = self.block_size * per_token
        else:
            per_token = self.num_kv_heads * (
                2 * self.head_size * self.dtype_bytes + self.scale_bytes_per_head
            )
            page = self.block_size * per_token
        object.__setattr__(self, "bytes_per_token", per_token)
        object.__setattr__(self, "page_size_bytes", page)
        object.__setattr__(self, "is_state", state)

    def max_blocks_per_request(
        self, *, max_model_len: int, in_flight_tokens: int, state_pages: int = 1
    ) -> int:
        """Most blocks one request of ``max_model_len`` tokens can hold in this layer.

        Full attention keeps every token; a sliding window keeps ``window − 1`` past tokens plus the tokens being
        scheduled, and one block more because the window need not start on a block boundary
        (``SlidingWindowSpec.max_memory_usage_bytes``); chunked attention keeps the current chunk plus the
        scheduled tokens; a constant-state layer holds one page (two when prefix caching keeps an aligned
        checkpoint of the state, vLLM's ``mamba_cache_mode="align"``).
        """
        if self.is_state:
            # MambaSpec.max_memory_usage_bytes (vllm/v1/kv_cache_interface.py, 0.32): align mode holds
            # 2 + num_prefill_checkpoint_blocks pages, and MambaMixer2 asks for one checkpoint block.
            # … plus num_speculative_blocks (= num_speculative_tokens) pages in either mode.
            checkpoint = 1 if self.prefill_checkpoint and state_pages > 1 else 0
            return state_pages + checkpoint + self.speculative_blocks
        if self.kind is LayerType.SLIDING:
            assert self.window_tokens is not None
            tokens = min(self.window_tokens - 1 + in_flight_tokens, max_model_len)
            return cdiv(tokens, self.block_size) + 1
        if self.kind is LayerType.CHUNKED:
            assert self.window_tokens is not None
            tokens = min(self.window_tokens + in_flight_tokens, max_model_len)
            return cdiv(tokens, self.block_size)
        return cdiv(max_model_len, self.block_size)


def kv_heads_per_rank(total_kv_heads: int, tensor_parallel_size: int) -> int:
    """KV heads one TP rank stores: ``max(1, heads // tp)``.

    With fewer KV heads than ranks each head is replicated (``ModelConfig.get_num_kv_heads``), so per-GPU KV
    stops shrinking at TP = KV heads: Falcon-7B (MQA, 1 KV head) stores the same KV on every rank.
    """
    return max(1, total_kv_heads // tensor_parallel_size)


def state_bytes(
    state: StateSpec, *, tensor_parallel_size: int, model_dtype: str, num_speculative_tokens: int = 0
) -> int:
    """Bytes of the constant per-request state of one Mamba/linear-attention layer on one rank.

    Shapes per ``StateSpec``; vLLM extends the Mamba2 group count so that every rank owns whole groups
    (``extra_groups_for_head_shards``): when ``n_groups`` does not divide by TP, groups are replicated to TP.
    With speculative decoding the Mamba2 and gated-DeltaNet conv states keep ``conv_kernel − 1 +
    num_speculative_tokens`` rows (``MambaStateShapeCalculator``, ``num_spec``, vLLM 0.32); Mamba1 does not.
    """
    tp = tensor_parallel_size
    default_bytes = MODEL_DTYPE_BYTES[normalize_model_dtype(model_dtype)]
    conv_bytes = (
        MODEL_DTYPE_BYTES[normalize_model_dtype(state.conv_dtype)] if state.conv_dtype else default_bytes
    )
    ssm_bytes = (
        MODEL_DTYPE_BYTES[normalize_model_dtype(state.ssm_dtype)] if state.ssm_dtype else default_bytes
    )
    if state.kind == "gated_delta_net":
        conv_dim = 2 * state.num_k_heads * state.head_k_dim + state.num_v_heads * state.head_v_dim
        conv = (conv_dim // tp) * (state.conv_kernel - 1 + num_speculative_tokens)
        ssm = (state.num_v_heads // tp) * state.head_k_dim * state.head_v_dim
    elif state.kind == "mamba2":
        groups = state.n_groups if state.n_groups % tp == 0 else tp
        conv = ((state.intermediate_size + 2 * groups * state.state_size) // tp) * (
            state.conv_kernel - 1 + num_speculative_tokens
        )
        ssm = prod((state.num_heads // tp, state.head_dim, state.state_size))
    elif state.kind == "short_conv":
        # LFM2 (vllm/model_executor/models/lfm2.py, get_mamba_state_shape_from_config, 0.32.0): one conv state of
        # conv_dim / tp × (conv_L_cache − 1), no SSM state; the model passes no speculative rows.
        conv = (state.intermediate_size // tp) * (state.conv_kernel - 1)
        ssm = 0
    else:
        conv = (state.intermediate_size // tp) * (state.conv_kernel - 1)
        ssm = (state.intermediate_size // tp) * state.state_size
    return conv * conv_bytes + ssm * ssm_bytes


SpecCounts = list[tuple["LayerKvSpec", int]]


@lru_cache(maxsize=4096)
def layer_spec_counts(
    model: ModelSpec,
    *,
    kv_dtype: KvCacheDtype,
    block_size: int,
    tensor_parallel_size: int = 1,
    layers: range | None = None,
    mla_dtype_bytes_override: int | None = None,
    model_dtype: str | None = None,
    mamba_prefill_checkpoint: bool = False,
    num_speculative_tokens: int = 0,
) -> tuple[tuple[LayerKvSpec, int], ...]:
    """Distinct ``LayerKvSpec`` of a rank's cached layers with how many layers use each.

    ``layers`` is the index range a pipeline stage owns. Layers that read another layer's KV
    (``num_kv_shared_layers``, Gemma 3n: the last N layers) cost nothing and are left out, as do MLP-only
    blocks (Nemotron-H), which register no attention or Mamba layer with the cache.
    ``mamba_prefill_checkpoint``: the release gives Mamba2 mixers a prefill checkpoint page in align mode.
    """
    if block_size <= 0:
        raise InvalidSpec("must be positive", field="block_size")
    span = range(model.num_hidden_layers) if layers is None else layers
    end = min(span.stop, model.num_hidden_layers - model.num_kv_shared_layers)
    kinds = Counter(model.resolved_layer_types[span.start : end])
    if model.state is not None and model.state.parallel_to_attention:
        # Falcon-H1: each attention layer's Mamba2 mixer is a cached layer of its own.
        kinds[LayerType.MAMBA] += sum(n for kind, n in kinds.items() if kind.is_attention)
    element = kv_dtype.bytes_per_element(model_dtype or model.torch_dtype)
    return tuple(
        [
            (
                _layer_spec(
                    model,
                    kind,
                    kv_dtype=kv_dtype,
                    element=element,
                    block_size=block_size,
                    tensor_parallel_size=tensor_parallel_size,
                    mla_dtype_bytes_override=mla_dtype_bytes_override,
                    mamba_prefill_checkpoint=mamba_prefill_checkpoint,
                    num_speculative_tokens=num_speculative_tokens,
                ),
                count,
            )
            for kind, count in kinds.items()
            if count and kind is not LayerType.MLP  # MLP-only blocks have no KV-cache spec
        ]
    )


def layer_specs(
    model: ModelSpec,
    *,
    kv_dtype: KvCacheDtype,
    block_size: int,
    tensor_parallel_size: int = 1,
    layers: range | None = None,
) -> list[LayerKvSpec]:
    """One ``LayerKvSpec`` per cached layer (the expanded form of ``layer_spec_counts``)."""
    counts = layer_spec_counts(
        model,
        kv_dtype=kv_dtype,
        block_size=block_size,
        tensor_parallel_size=tensor_parallel_size,
        layers=layers,
    )
    return [spec for spec, count in counts for _ in range(count)]


def _layer_spec(
    model: ModelSpec,
    kind: LayerType,
    *,
    kv_dtype: KvCacheDtype,
    element: int,
    block_size: int,
    tensor_parallel_size: int,
    mla_dtype_bytes_override: int | None,
    mamba_prefill_checkpoint: bool = False,
    num_speculative_tokens: int = 0,
) -> LayerKvSpec:
    if kind.is_state:
        assert model.state is not None
        return LayerKvSpec(
            kind=kind,
            block_size=block_size,
            state_bytes=state_bytes(
                model.state,
                tensor_parallel_size=tensor_parallel_size,
                model_dtype=model.torch_dtype,
                num_speculative_tokens=num_speculative_tokens
                if model.state.kind not in ("mamba1", "short_conv")
                else 0,
            ),
            prefill_checkpoint=mamba_prefill_checkpoint and model.state.kind == "mamba2",
            speculative_blocks=num_speculative_tokens,
        )
    if kind is LayerType.MLA:
        assert model.kv_lora_rank is not None and model.qk_rope_head_dim is not None
        return LayerKvSpec(
            kind=kind,
            block_size=block_size,
            num_kv_heads=1,
            head_size=model.kv_lora_rank + model.qk_rope_head_dim,
            dtype_bytes=mla_dtype_bytes_override or element,
        )
    window = {LayerType.SLIDING: model.sliding_window, LayerType.CHUNKED: model.attention_chunk_size}.get(
        kind
    )
    kv_heads, head_size = model.num_key_value_heads, model.head_dim
    if kind is LayerType.FULL:
        # Gemma 4 (vllm/model_executor/models/gemma4.py, Gemma4DecoderLayer, 0.32.0): each layer's Attention takes
        # head_dim and num_key_value_heads from ``config.per_layer_config[layer]``, which transformers fills for
        # full-attention layers with global_head_dim (and num_global_key_value_heads under attention_k_eq_v).
        kv_heads = model.full_attention_kv_heads or kv_heads
        head_size = model.full_attention_head_dim or head_size
    return LayerKvSpec(
        kind=kind,
        block_size=block_size,
        num_kv_heads=kv_heads_per_rank(kv_heads, tensor_parallel_size),
        head_size=head_size,
        dtype_bytes=element,
        scale_bytes_per_head=kv_dtype.scale_bytes_per_head,
        window_tokens=window,
    )


def bytes_per_token(counts: SpecCounts) -> int:
    """KV bytes one token costs on a rank, summed over its attention layers (the seed's headline number)."""
    return sum(spec.bytes_per_token * count for spec, count in counts)


@dataclass(frozen=True, slots=True, kw_only=True)
class KvGroup:
    """Layers that share a block table (vLLM ``KVCacheGroupSpec``); padded groups have fewer real layers."""

    spec: LayerKvSpec
    num_layers: int


@dataclass(frozen=True, slots=True, kw_only=True)
class KvLayout:
    """How a rank's layers are grouped and how many layers draw on the shared pool per block."""

    groups: tuple[KvGroup, ...]
    group_size: int  # tensors in the pool = layers per group (padding included)
    page_size_bytes: int  # one block in one tensor (uniform across groups)
    padding_layers: int = 0
    notes: tuple[str, ...] = field(default=())
    # Distinct group specs and how many groups use each (the per-request block sum needs only these).
    groups_per_spec: tuple[tuple[LayerKvSpec, int], ...] = field(init=False, compare=False, default=())

    @property
    def bytes_per_block(self) -> int:
        """Bytes one block id costs across the pool (``page_size_bytes × group_size``)."""
        return self.page_size_bytes * self.group_size

    def __post_init__(self) -> None:
        counts: dict[LayerKvSpec, int] = {}
        for group in self.groups:
            counts[group.spec] = counts.get(group.spec, 0) + 1
        object.__setattr__(self, "groups_per_spec", tuple(counts.items()))


@lru_cache(maxsize=4096)
def group_layers(counts: tuple[tuple[LayerKvSpec, int], ...], *, uniform_ratio: float = 1.25) -> KvLayout:
    """Bucket equal specs and cut the buckets into equal-size groups (``_get_kv_cache_groups_uniform_page_size``).

    ``group_size`` is the smallest bucket, or the largest when every bucket is within ``uniform_ratio`` of the
    smallest (fewer groups, less padding). A bucket whose size is not a multiple of ``group_size`` is padded:
    Gemma-3-27B has 52 sliding and 10 full layers → group size 10, six sliding groups (two padding layers) and
    one full group. A single bucket is one group of every layer (the dense case).
    """
    buckets: dict[LayerKvSpec, int] = {}
    for spec, count in counts:
        buckets[spec] = buckets.get(spec, 0) + count
    if not buckets:
        raise InvalidSpec("the model has no layer that keeps a KV cache on this rank", field="model")
    pages = {spec.page_size_bytes for spec in buckets}
    if len(pages) != 1:
        raise InvalidSpec(
            "layers have different page sizes; unify them first (unify_page_sizes)", field="model"
        )
    page = pages.pop()
    if len(buckets) == 1:
        ((spec, count),) = buckets.items()
        return KvLayout(
            groups=(KvGroup(spec=spec, num_layers=count),), group_size=count, page_size_bytes=page
        )
    smallest, largest = min(buckets.values()), max(buckets.values())
    group_size = largest if largest < smallest * uniform_ratio else smallest
    groups: list[KvGroup] = []
    padding = 0
    notes: list[str] = []
    for spec, count in buckets.items():
        n_groups = cdiv(count, group_size)
        pad = n_groups * group_size - count
        if pad:
            padding += pad
            notes.append(
                f"Add {pad} padding layers, may waste at most {pad / count * 100:.2f}% KV cache memory ({spec.kind.value})"
            )
        base, extra = divmod(count, n_groups)
        groups.extend(KvGroup(spec=spec, num_layers=base + (1 if i < extra else 0)) for i in range(n_groups))
    return KvLayout(
        groups=tuple(groups),
        group_size=group_size,
        page_size_bytes=page,
        padding_layers=padding,
        notes=tuple(notes),
    )


def unify_page_sizes(
    counts: SpecCounts, *, kernel_block_alignment: int = 16, attention_bytes_per_token: int | None = None
) -> tuple[SpecCounts, int, str]:
    """Make attention and constant-state pages equal, as vLLM does for Mamba hybrids.

    ``HybridAttentionMambaModelConfig.verify_and_update_config``: the attention block size is raised to the
    smallest multiple of the kernel alignment whose page holds at least one Mamba state, then the Mamba page is
    padded up to the attention page. Returns the new counts, the attention block size and a note.

    ``attention_bytes_per_token``: the per-token attention page vLLM sizes the block from when it is not the layers'
    own — ``HybridAttentionMambaModelConfig`` builds it from ``model_config.get_head_size()``, the config's
    head_dim, even where the model file pages other heads. Layers whose page then falls short of the padded state
    page get a larger block afterwards (``unify_kv_cache_spec_page_size``).
    """
    states = [s for s, _ in counts if s.is_state]
    attention = [s for s, _ in counts if not s.is_state]
    if not states or not attention:
        return list(counts), counts[0][0].block_size if counts else 0, ""
    state_page = max(s.state_bytes for s in states)
    per_token = attention_bytes_per_token or max(s.bytes_per_token for s in attention)
    block = max(
        attention[0].block_size, kernel_block_alignment * cdiv(state_page, kernel_block_alignment * per_token)
    )
    attn_page = block * per_token
    unified = [
        (
            replace(s, padded_state_bytes=attn_page, block_size=block)
            if s.is_state
            else replace(s, block_size=block),
            n,
        )
        for s, n in counts
    ]
    note = (
        f"attention block size {block} so that one attention page ({attn_page:,} B) holds a Mamba state "
        f"({state_page:,} B, padded by {(attn_page - state_page) / state_page * 100:.2f}%)"
    )
    return unified, block, note


def num_blocks(available_bytes: int, layout: KvLayout) -> int:
    """Blocks that fit: ``available // page_size // group_size`` (``get_num_blocks``), never negative."""
    if available_bytes <= 0:
        return 0
    return available_bytes // layout.page_size_bytes // layout.group_size


def blocks_per_request(
    layout: KvLayout, *, max_model_len: int, in_flight_tokens: int, state_pages: int = 1
) -> int:
    """Blocks one full-length request needs across all groups (``get_max_concurrency_for_kv_cache_config``).

    vLLM sums each group's worst-case bytes, multiplies by the layers per group, and divides by one block's
    bytes across the pool; since every group's worst case is a whole number of pages this is
    ``Σ_groups max_blocks_per_request(group)``.
    """
    total = 0
    for spec, groups in layout.groups_per_spec:
        total += groups * spec.max_blocks_per_request(
            max_model_len=max_model_len, in_flight_tokens=in_flight_tokens, state_pages=state_pages
        )
    return total


def max_concurrency(num_gpu_blocks: int, per_request_blocks: int) -> float:
    """vLLM's ``Maximum concurrency for L tokens per request``: blocks / blocks one request needs."""
    return num_gpu_blocks / per_request_blocks if per_request_blocks else 0.0
