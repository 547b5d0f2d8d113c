"""What the capacity math needs to know about a model and an accelerator, and nothing else.

Field names follow Hugging Face ``config.json`` (``num_hidden_layers``, ``num_key_value_heads``, ``head_dim`` …) so
a reader can check a spec against the model card. Values are already *resolved*: ``num_key_value_heads`` is the
total KV head count vLLM uses (MHA fallback, Falcon ``multi_query`` → 1), ``head_dim`` the per-head size, and
``layer_types`` holds one entry per decoder layer. ``service.core.hf_config`` produces a ``ModelSpec`` from a
raw config.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum

from service.core import bounds as b
from service.core.dtypes import MODEL_DTYPE_BYTES, normalize_model_dtype
from service.core.errors import InvalidSpec


class LayerType(StrEnum):
    """The KV-cache behaviour of one decoder layer (vLLM's ``KVCacheSpec`` subclasses)."""

    FULL = "full_attention"  # FullAttentionSpec: every token of the context stays cached
    SLIDING = "sliding_attention"  # SlidingWindowSpec: same bytes per token, at most ~window tokens held
    CHUNKED = "chunked_attention"  # ChunkedLocalAttentionSpec (Llama 4): attention within fixed chunks
    MLA = "mla"  # MLAAttentionSpec: one latent head (kv_lora_rank + qk_rope_head_dim), never split by TP
    MAMBA = "mamba"  # MambaSpec: constant SSM + conv state per request
    LINEAR = "linear_attention"  # MambaSpec-shaped constant state (gated DeltaNet and friends)
    MLP = "mlp"  # an MLP- or MoE-only block (Nemotron-H's "-" and "E"): no attention, no state, no cache

    @property
    def is_attention(self) -> bool:
        return self in _ATTENTION_KINDS

    @property
    def is_state(self) -> bool:
        return self in _STATE_KINDS


_ATTENTION_KINDS = frozenset({LayerType.FULL, LayerType.SLIDING, LayerType.CHUNKED, LayerType.MLA})
_STATE_KINDS = frozenset({LayerType.MAMBA, LayerType.LINEAR})


def _require_positive(**values: int | None) -> None:
    for name, value in values.items():
        if value is not None and value <= 0:
            raise InvalidSpec(f"must be a positive integer, got {value}", field=name)


def _require_at_most(limits: dict[str, tuple[int | None, int]], *, minimum: int = 1) -> None:
    """Each ``name: (value, maximum)`` an integer in ``[minimum, maximum]`` (``service.core.bounds``)."""
    for name, (value, maximum) in limits.items():
        b.check_range(value, field=name, minimum=minimum, maximum=maximum)


@dataclass(frozen=True, slots=True, kw_only=True)
class StateSpec:
    """Constant per-request state of Mamba-style and linear-attention layers.

    ``kind`` picks the shape rule (``vllm/model_executor/layers/mamba/mamba_utils.py::MambaStateShapeCalculator``):
      * ``mamba2``: conv state ``(intermediate_size + 2·n_groups·state_size) / tp × (conv_kernel − 1)``,
        SSM state ``num_heads / tp × head_dim × state_size``;
      * ``mamba1``: conv ``intermediate_size / tp × (conv_kernel − 1)``, SSM ``intermediate_size / tp × state_size``;
      * ``gated_delta_net``: conv ``(2·num_k_heads·head_k_dim + num_v_heads·head_v_dim) / tp × (conv_kernel − 1)``,
        recurrent state ``num_v_heads / tp × head_k_dim × head_v_dim``;
      * ``short_conv`` (LFM2's gated short convolution): a conv state only, ``intermediate_size / tp ×
        (conv_kernel − 1)`` (``short_conv_state_shape``).

    ``parallel_to_attention``: every attention layer also runs this mixer side by side and both register with the
    KV cache (Falcon-H1's ``FalconH1ParallelHybrid``: one ``Attention`` and one ``MambaMixer2`` per decoder layer).
    """

    kind: str
    conv_kernel: int
    intermediate_size: int = 0
    n_groups: int = 1
    state_size: int = 0
    num_heads: int = 0
    head_dim: int = 0
    num_k_heads: int = 0
    num_v_heads: int = 0
    head_k_dim: int = 0
    head_v_dim: int = 0
    conv_dtype: str | None = None  # None → model dtype
    ssm_dtype: str | None = None  # None → model dtype
    parallel_to_attention: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("mamba1", "mamba2", "gated_delta_net", "short_conv"):
            raise InvalidSpec(f"unknown state layer kind {self.kind!r}", field="state.kind")
        _require_positive(conv_kernel=self.conv_kernel)
        _require_at_most(
            {
                "state.conv_kernel": (self.conv_kernel, b.MAX_CONV_KERNEL),
                "state.n_groups": (self.n_groups, b.MAX_STATE_DIM),
            }
        )
        _require_at_most(
            {
                "state.intermediate_size": (self.intermediate_size, b.MAX_INTERMEDIATE_SIZE),
                "state.state_size": (self.state_size, b.MAX_STATE_DIM),
                "state.num_heads": (self.num_heads, b.MAX_STATE_DIM),
                "state.head_dim": (self.head_dim, b.MAX_HEAD_DIM),
                "state.num_k_heads": (self.num_k_heads, b.MAX_STATE_DIM),
                "state.num_v_heads": (self.num_v_heads, b.MAX_STATE_DIM),
                "state.head_k_dim": (self.head_k_dim, b.MAX_HEAD_DIM),
                "state.head_v_dim": (self.head_v_dim, b.MAX_HEAD_DIM),
            },
            minimum=0,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """Architecture numbers that memory depends on (resolved; see module docstring)."""

    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    num_parameters: int
    torch_dtype: str = "bfloat16"
    intermediate_size: int | None = None
    max_position_embeddings: int | None = None
    max_model_len: int | None = None  # vLLM's derived default context (rope scaling applied)
    layer_types: tuple[LayerType, ...] = ()
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    q_lora_rank: int | None = None
    num_experts: int | None = None
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None
    num_shared_experts: int | None = None
    first_k_dense_replace: int | None = None
    num_active_parameters: int | None = None
    num_kv_shared_layers: int = 0
    # Gemma 4's full-attention layers: wider heads (``global_head_dim``) and, with ``attention_k_eq_v``, their own
    # KV head count (``num_global_key_value_heads``); None → head_dim / num_key_value_heads like every other layer.
    # ``ModelConfig.get_head_size()`` when it is not the layers' head size (a head_dim key the model file ignores):
    # vLLM sizes a Mamba hybrid's attention block from it (vllm/platforms/interface.py, 0.32.0).
    config_head_dim: int | None = None
    full_attention_head_dim: int | None = None
    full_attention_kv_heads: int | None = None
    rope_cache_bytes: int = 0  # vLLM's cos/sin caches (registered buffers, loaded with the weights)
    unquantized_parameters: int = 0  # linear weights a quantised checkpoint keeps in the model dtype
    num_nextn_predict_layers: int = (
        0  # MTP layers shipped for speculative decoding (DeepSeek-V3, Qwen3-Next …)
    )
    encoder_parameters: int = 0  # multimodal tower + projector (inside num_parameters)
    mm_tokens_per_item: int | None = None  # embedding tokens of the largest image (encoder cache unit)
    mm_pixels_per_token: int | None = None  # Qwen-VL: (patch × spatial_merge)², tokens = max_pixels // this
    state: StateSpec | None = None
    quantization: str | None = None  # the checkpoint's native quantisation (fp8, mxfp4, awq …)
    tie_word_embeddings: bool = False
    model_type: str | None = None
    architecture: str | None = None
    notes: tuple[str, ...] = field(default=())
    # Derived once in __post_init__ (read in the planner's inner loops).
    _kinds: tuple[LayerType, ...] = field(init=False, repr=False, compare=False, default=())
    _uses_mla: bool = field(init=False, repr=False, compare=False, default=False)
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        # Ranges first: a ten-million-layer spec must not build its ten-million-entry layer table.
        _require_at_most(
            {
                "num_hidden_layers": (self.num_hidden_layers, b.MAX_LAYERS),
                "hidden_size": (self.hidden_size, b.MAX_HIDDEN_SIZE),
                "num_attention_heads": (self.num_attention_heads, b.MAX_HEADS),
                "num_key_value_heads": (self.num_key_value_heads, b.MAX_HEADS),
                "head_dim": (self.head_dim, b.MAX_HEAD_DIM),
                "vocab_size": (self.vocab_size, b.MAX_VOCAB),
                "num_parameters": (self.num_parameters, b.MAX_PARAMETERS),
                "num_active_parameters": (self.num_active_parameters, b.MAX_PARAMETERS),
                "intermediate_size": (self.intermediate_size, b.MAX_INTERMEDIATE_SIZE),
                "moe_intermediate_size": (self.moe_intermediate_size, b.MAX_INTERMEDIATE_SIZE),
                "max_position_embeddings": (self.max_position_embeddings, b.MAX_CONTEXT_TOKENS),
                "max_model_len": (self.max_model_len, b.MAX_CONTEXT_TOKENS),
                "sliding_window": (self.sliding_window, b.MAX_CONTEXT_TOKENS),
                "attention_chunk_size": (self.attention_chunk_size, b.MAX_CONTEXT_TOKENS),
                "kv_lora_rank": (self.kv_lora_rank, b.MAX_LORA_RANK),
                "q_lora_rank": (self.q_lora_rank, b.MAX_LORA_RANK),
                "qk_rope_head_dim": (self.qk_rope_head_dim, b.MAX_HEAD_DIM),
                "qk_nope_head_dim": (self.qk_nope_head_dim, b.MAX_HEAD_DIM),
                "v_head_dim": (self.v_head_dim, b.MAX_HEAD_DIM),
                "num_experts": (self.num_experts, b.MAX_EXPERTS),
                "num_experts_per_tok": (self.num_experts_per_tok, b.MAX_EXPERTS),
                "num_shared_experts": (self.num_shared_experts, b.MAX_EXPERTS),
                "config_head_dim": (self.config_head_dim, b.MAX_HEAD_DIM),
                "full_attention_head_dim": (self.full_attention_head_dim, b.MAX_HEAD_DIM),
                "full_attention_kv_heads": (self.full_attention_kv_heads, b.MAX_HEADS),
            }
        )
        _require_at_most(
            {
                "first_k_dense_replace": (self.first_k_dense_replace, b.MAX_LAYERS),
                "num_kv_shared_layers": (self.num_kv_shared_layers, b.MAX_LAYERS),
                "rope_cache_bytes": (self.rope_cache_bytes, b.MAX_PARAMETERS),
                "unquantized_parameters": (self.unquantized_parameters, self.num_parameters),
                "num_nextn_predict_layers": (self.num_nextn_predict_layers, b.MAX_LAYERS),
                "encoder_parameters": (self.encoder_parameters, b.MAX_PARAMETERS),
                "mm_tokens_per_item": (self.mm_tokens_per_item, b.MAX_CONTEXT_TOKENS),
                "mm_pixels_per_token": (self.mm_pixels_per_token, b.MAX_CONTEXT_TOKENS),
            },
            minimum=0,
        )
        resolved = self.layer_types or (LayerType.FULL,) * self.num_hidden_layers
        object.__setattr__(self, "_kinds", resolved)
        object.__setattr__(self, "_uses_mla", LayerType.MLA in resolved)
        # Specs key the planner's memoised terms; hash the compared fields once instead of on every lookup.
        object.__setattr__(
            self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))
        )
        _require_positive(
            num_hidden_layers=self.num_hidden_layers,
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            vocab_size=self.vocab_size,
            num_parameters=self.num_parameters,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=self.max_position_embeddings,
            max_model_len=self.max_model_len,
            sliding_window=self.sliding_window,
            attention_chunk_size=self.attention_chunk_size,
            kv_lora_rank=self.kv_lora_rank,
            num_experts=self.num_experts,
            num_experts_per_tok=self.num_experts_per_tok,
            num_active_parameters=self.num_active_parameters,
            full_attention_head_dim=self.full_attention_head_dim,
            full_attention_kv_heads=self.full_attention_kv_heads,
        )
        normalize_model_dtype(self.torch_dtype, field="torch_dtype")
        if self.num_key_value_heads > self.num_attention_heads:
            raise InvalidSpec(
                f"num_key_value_heads ({self.num_key_value_heads}) cannot exceed num_attention_heads "
                f"({self.num_attention_heads})",
                field="num_key_value_heads",
            )
        if self.layer_types and len(self.layer_types) != self.num_hidden_layers:
            raise InvalidSpec(
                f"has {len(self.layer_types)} entries but num_hidden_layers is {self.num_hidden_layers}",
                field="layer_types",
            )
        kinds = set(self.resolved_layer_types)
        if LayerType.SLIDING in kinds and self.sliding_window is None:
            raise InvalidSpec("sliding_attention layers need sliding_window", field="sliding_window")
        if LayerType.CHUNKED in kinds and self.attention_chunk_size is None:
            raise InvalidSpec(
                "chunked_attention layers need attention_chunk_size", field="attention_chunk_size"
            )
        if LayerType.MLA in kinds and (self.kv_lora_rank is None or self.qk_rope_head_dim is None):
            raise InvalidSpec("mla layers need kv_lora_rank and qk_rope_head_dim", field="kv_lora_rank")
        if kinds & {LayerType.MAMBA, LayerType.LINEAR} and self.state is None:
            raise InvalidSpec("mamba/linear_attention layers need a state spec", field="state")
        if not 0 <= self.num_kv_shared_layers < self.num_hidden_layers:
            raise InvalidSpec("must be between 0 and num_hidden_layers - 1", field="num_kv_shared_layers")

    def __hash__(self) -> int:
        return self._hash

    @property
    def resolved_layer_types(self) -> tuple[LayerType, ...]:
        """One entry per layer; an empty ``layer_types`` means every layer is full attention."""
        return self._kinds

    @property
    def weight_bytes_per_element(self) -> int:
        return MODEL_DTYPE_BYTES[normalize_model_dtype(self.torch_dtype)]

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts and self.num_experts > 1)

    @property
    def uses_mla(self) -> bool:
        return self._uses_mla


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One accelerator as the planner sees it.

    ``memory_bytes`` is the total the runtime reports for the device (vLLM's ``total_gpu_memory``; less than the
    marketing size: 79.22 GiB for an H100 80GB). Throughput figures are dense (no sparsity) and optional: the
    capacity math needs only memory.
    """

    name: str
    memory_bytes: int
    memory_bandwidth_bytes_per_second: int | None = None
    bf16_dense_flops_per_second: int | None = None
    fp8_dense_flops_per_second: int | None = None
    interconnect_bandwidth_bytes_per_second: int | None = None
    price_per_hour_usd: float | None = None
    supports_fp8: bool = True
    supports_bf16: bool = True
    compute_capability: str | None = None  # NVIDIA "9.0" (Hopper), "10.0" (Blackwell); AMD gfx arch

    def __post_init__(self) -> None:
        _require_positive(memory_bytes=self.memory_bytes)
        _require_positive(
            memory_bandwidth_bytes_per_second=self.memory_bandwidth_bytes_per_second,
            bf16_dense_flops_per_second=self.bf16_dense_flops_per_second,
            fp8_dense_flops_per_second=self.fp8_dense_flops_per_second,
            interconnect_bandwidth_bytes_per_second=self.interconnect_bandwidth_bytes_per_second,
        )
        if self.price_per_hour_usd is not None and self.price_per_hour_usd < 0:
            raise InvalidSpec("must not be negative", field="price_per_hour_usd")
