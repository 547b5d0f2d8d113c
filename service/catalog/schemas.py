"""Catalog request/response schemas (``XCreate``, ``XUpdate`` all optional, ``XRead``).

Model field names are Hugging Face ``config.json`` keys; GPU field names carry their units. Bounds keep values
inside the database column types (64-bit byte counts, 32-bit layer counts) so bad input is a 422, never a 500.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, StringConstraints

from service.api.text import SafeText
from service.core import bounds

SLUG_PATTERN = r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$"
Slug = Annotated[
    str,
    StringConstraints(pattern=SLUG_PATTERN, max_length=64),
    Field(description="lowercase slug: letters, digits, '.', '_' and '-'", examples=["llama-3.1-8b"]),
]
Text = Annotated[str, StringConstraints(min_length=1, max_length=2000, strip_whitespace=True)]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]
BigCount = Annotated[int, Field(gt=0, le=2**62)]
Count = Annotated[int, Field(gt=0, le=2**31 - 1)]
SmallCount = Annotated[int, Field(gt=0, le=1_000_000)]


# Architecture numbers in the core's plausible ranges (``service.core.bounds`` cites the largest published
# models); a value outside is a 422 naming the field, before any plan is computed.
Layers = Annotated[int, Field(ge=1, le=bounds.MAX_LAYERS)]
LayerIndex = Annotated[int, Field(ge=0, le=bounds.MAX_LAYERS)]
Hidden = Annotated[int, Field(ge=1, le=bounds.MAX_HIDDEN_SIZE)]
Heads = Annotated[int, Field(ge=1, le=bounds.MAX_HEADS)]
HeadDim = Annotated[int, Field(ge=1, le=bounds.MAX_HEAD_DIM)]
Vocab = Annotated[int, Field(ge=1, le=bounds.MAX_VOCAB)]
Intermediate = Annotated[int, Field(ge=1, le=bounds.MAX_INTERMEDIATE_SIZE)]
Tokens = Annotated[int, Field(ge=1, le=bounds.MAX_CONTEXT_TOKENS)]
Experts = Annotated[int, Field(ge=1, le=bounds.MAX_EXPERTS)]
LoraRank = Annotated[int, Field(ge=1, le=bounds.MAX_LORA_RANK)]
Parameters = Annotated[int, Field(ge=1, le=bounds.MAX_PARAMETERS)]
RopeCacheBytes = Annotated[int, Field(ge=0, le=bounds.MAX_PARAMETERS)]  # a byte or parameter count, 0 allowed
StateDim = Annotated[int, Field(ge=0, le=bounds.MAX_STATE_DIM)]
StateHeadDim = Annotated[int, Field(ge=0, le=bounds.MAX_HEAD_DIM)]

Vendor = Literal["nvidia", "amd", "intel", "google", "aws", "other"]
KvCacheDtypeName = Literal[
    "auto",
    "bfloat16",
    "float16",
    "float32",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "int8",
    "int8_per_token_head",
    "fp8_per_token_head",
]
WeightDtypeName = Literal["float32", "bfloat16", "float16", "fp8", "int8", "int4", "mxfp4", "nvfp4"]
ModelDtypeName = Literal["bfloat16", "float16", "float32"]
LayerTypeName = Literal[
    "full_attention", "sliding_attention", "chunked_attention", "mla", "mamba", "linear_attention"
]
QuantizationName = Literal[
    "fp8",
    "int8",
    "int4",
    "awq",
    "gptq",
    "gptq-int8",
    "mxfp4",
    "nvfp4",
    "bitsandbytes",
    "compressed-tensors",
    "gguf",
    "modelopt",
    "modelopt_fp4",
    "fbgemm_fp8",
]


class Schema(SafeText):
    # Validators are built on first use, not at import: an offline plan never builds the Read/Update ones.
    model_config = ConfigDict(from_attributes=True, extra="forbid", defer_build=True)


class Interconnect(Schema):
    kind: Literal["nvlink", "nvlink_bridge", "pcie", "infinity_fabric", "none"]
    bandwidth_bytes_per_second: BigCount | None = Field(
        default=None, description="per-GPU bidirectional bandwidth of the GPU-to-GPU link"
    )
    pcie_generation: Annotated[int, Field(ge=1, le=7)] | None = None


class GpuFields(Schema):
    display_name: ShortText | None = None
    vendor: Vendor
    memory_bytes: BigCount = Field(description="datasheet memory capacity in bytes")
    usable_memory_bytes: BigCount | None = Field(
        default=None,
        description="total memory the runtime reports for the device (vLLM's total_gpu_memory); used for plans",
    )
    usable_memory_source: Text | None = None
    memory_bandwidth_bytes_per_second: BigCount | None = Field(
        default=None, description="datasheet peak; null when unpublished"
    )
    bf16_dense_flops_per_second: BigCount | None = Field(default=None, description="dense (no sparsity)")
    fp8_dense_flops_per_second: BigCount | None = Field(default=None, description="dense (no sparsity)")
    interconnect: Interconnect | None = None
    compute_capability: Annotated[str, StringConstraints(max_length=32)] | None = None
    supported_kv_cache_dtypes: list[KvCacheDtypeName] = Field(
        default_factory=lambda: list[KvCacheDtypeName](["auto"])
    )
    supported_weight_dtypes: list[WeightDtypeName] = Field(
        default_factory=lambda: list[WeightDtypeName](["bfloat16", "float16"])
    )
    price_per_hour_usd: Annotated[float, Field(ge=0, le=100_000)] | None = None
    price_source: Text | None = None
    product_labels: list[ShortText] = Field(
        default_factory=list, description="nvidia.com/gpu.product node-label values that mean this GPU"
    )
    source: Text = Field(description="where the figures come from (datasheet URL or document)")
    notes: Text | None = None


class GpuCreate(GpuFields):
    name: Slug


class GpuUpdate(Schema):
    display_name: ShortText | None = None
    vendor: Vendor | None = None
    memory_bytes: BigCount | None = None
    usable_memory_bytes: BigCount | None = None
    usable_memory_source: Text | None = None
    memory_bandwidth_bytes_per_second: BigCount | None = None
    bf16_dense_flops_per_second: BigCount | None = None
    fp8_dense_flops_per_second: BigCount | None = None
    interconnect: Interconnect | None = None
    compute_capability: Annotated[str, StringConstraints(max_length=32)] | None = None
    supported_kv_cache_dtypes: list[KvCacheDtypeName] | None = None
    supported_weight_dtypes: list[WeightDtypeName] | None = None
    price_per_hour_usd: Annotated[float, Field(ge=0, le=100_000)] | None = None
    price_source: Text | None = None
    product_labels: list[ShortText] | None = None
    source: Text | None = None
    notes: Text | None = None


class Provenance(Schema):
    version: int
    origin: Literal["builtin", "user", "import"] = Field(
        description="builtin: shipped with kvcap; import: from an HF config; user: created or edited through the API"
    )
    created_at: datetime
    updated_at: datetime


class GpuRead(GpuCreate, Provenance):
    model_config = ConfigDict(from_attributes=True, extra="ignore", defer_build=True)
    _check_text: ClassVar[bool] = False


class StateFields(Schema):
    """Constant per-request state of Mamba / linear-attention layers (see ``service.core.specs.StateSpec``)."""

    kind: Literal["mamba1", "mamba2", "gated_delta_net", "short_conv"]
    parallel_to_attention: bool = False  # every attention layer also runs the mixer (Falcon-H1)
    conv_kernel: Annotated[int, Field(ge=1, le=bounds.MAX_CONV_KERNEL)]
    intermediate_size: Annotated[int, Field(ge=0, le=bounds.MAX_INTERMEDIATE_SIZE)] = 0
    n_groups: Annotated[int, Field(ge=1, le=bounds.MAX_STATE_DIM)] = 1
    state_size: StateDim = 0
    num_heads: StateDim = 0
    head_dim: StateHeadDim = 0
    num_k_heads: StateDim = 0
    num_v_heads: StateDim = 0
    head_k_dim: StateHeadDim = 0
    head_v_dim: StateHeadDim = 0
    conv_dtype: ModelDtypeName | None = None
    ssm_dtype: ModelDtypeName | None = None


class ModelArchitecture(Schema):
    """The architecture numbers memory depends on (HF config names; values as vLLM resolves them)."""

    num_hidden_layers: Layers
    hidden_size: Hidden
    num_attention_heads: Heads
    num_key_value_heads: Heads
    head_dim: HeadDim
    vocab_size: Vocab
    intermediate_size: Intermediate | None = None
    max_position_embeddings: Tokens | None = None
    max_model_len: Tokens | None = Field(default=None, description="vLLM's default context for this model")
    torch_dtype: ModelDtypeName = "bfloat16"
    num_parameters: Parameters
    num_active_parameters: Parameters | None = None
    layer_types: list[LayerTypeName] = Field(
        default_factory=list,
        max_length=bounds.MAX_LAYERS,
        description="one entry per layer; empty = full attention everywhere",
    )
    sliding_window: Tokens | None = None
    attention_chunk_size: Tokens | None = None
    kv_lora_rank: LoraRank | None = None
    qk_rope_head_dim: HeadDim | None = None
    qk_nope_head_dim: HeadDim | None = None
    v_head_dim: HeadDim | None = None
    q_lora_rank: LoraRank | None = None
    num_experts: Experts | None = None
    num_experts_per_tok: Experts | None = None
    moe_intermediate_size: Intermediate | None = None
    num_shared_experts: Experts | None = None
    first_k_dense_replace: LayerIndex | None = None
    num_kv_shared_layers: LayerIndex = 0
    rope_cache_bytes: RopeCacheBytes = Field(
        default=0, description="bytes of vLLM's RoPE cos/sin caches, loaded with the weights on every GPU"
    )
    unquantized_parameters: RopeCacheBytes = Field(
        default=0,
        description="linear-layer parameters the checkpoint's quantization_config leaves unquantised "
        "(modules_to_not_convert)",
    )
    num_nextn_predict_layers: LayerIndex = Field(
        default=0, description="MTP layers for speculative decoding (config num_nextn_predict_layers)"
    )
    encoder_parameters: Annotated[int, Field(ge=0, le=bounds.MAX_PARAMETERS)] = Field(
        default=0, description="multimodal tower + projector parameters (part of num_parameters)"
    )
    mm_tokens_per_item: Annotated[int, Field(ge=1, le=bounds.MAX_CONTEXT_TOKENS)] | None = Field(
        default=None, description="embedding tokens of the largest image"
    )
    mm_pixels_per_token: Annotated[int, Field(ge=1, le=bounds.MAX_CONTEXT_TOKENS)] | None = Field(
        default=None, description="Qwen-VL: pixels per image token, (patch × spatial_merge_size)²"
    )
    config_head_dim: HeadDim | None = Field(
        default=None,
        description="the config's head_dim where the model file ignores it (vLLM sizes a hybrid's block from it)",
    )
    full_attention_head_dim: HeadDim | None = Field(
        default=None, description="Gemma 4: head size of the full-attention layers (global_head_dim)"
    )
    full_attention_kv_heads: Heads | None = Field(
        default=None,
        description="Gemma 4: KV heads of the full-attention layers (num_global_key_value_heads)",
    )
    state: StateFields | None = None
    quantization: QuantizationName | None = Field(
        default=None, description="the checkpoint's native quantization"
    )
    tie_word_embeddings: bool = False
    model_type: Annotated[str, StringConstraints(max_length=64)] | None = None
    architecture: Annotated[str, StringConstraints(max_length=128)] | None = None


class ModelFields(ModelArchitecture):
    hf_id: Annotated[str, StringConstraints(max_length=200, pattern=r"^[\w.\-]+(/[\w.\-]+)?$")] | None = None
    aliases: list[Annotated[str, StringConstraints(max_length=200, pattern=r"^[\w.\-]+(/[\w.\-]+)?$")]] = (
        Field(default_factory=list, description="other Hugging Face ids with the same architecture")
    )
    family: Annotated[str, StringConstraints(max_length=64)] | None = None
    source: Text
    notes: Text | None = None


class ModelCreate(ModelFields):
    name: Slug


class ModelUpdate(Schema):
    """Every field optional; send only what changes. ``null`` clears an optional field."""

    hf_id: Annotated[str, StringConstraints(max_length=200, pattern=r"^[\w.\-]+(/[\w.\-]+)?$")] | None = None
    aliases: (
        list[Annotated[str, StringConstraints(max_length=200, pattern=r"^[\w.\-]+(/[\w.\-]+)?$")]] | None
    ) = None
    family: Annotated[str, StringConstraints(max_length=64)] | None = None
    source: Text | None = None
    notes: Text | None = None
    num_hidden_layers: Layers | None = None
    hidden_size: Hidden | None = None
    num_attention_heads: Heads | None = None
    num_key_value_heads: Heads | None = None
    head_dim: HeadDim | None = None
    vocab_size: Vocab | None = None
    intermediate_size: Intermediate | None = None
    max_position_embeddings: Tokens | None = None
    max_model_len: Tokens | None = None
    torch_dtype: ModelDtypeName | None = None
    num_parameters: Parameters | None = None
    num_active_parameters: Parameters | None = None
    layer_types: Annotated[list[LayerTypeName], Field(max_length=bounds.MAX_LAYERS)] | None = None
    sliding_window: Tokens | None = None
    attention_chunk_size: Tokens | None = None
    kv_lora_rank: LoraRank | None = None
    qk_rope_head_dim: HeadDim | None = None
    qk_nope_head_dim: HeadDim | None = None
    v_head_dim: HeadDim | None = None
    q_lora_rank: LoraRank | None = None
    num_experts: Experts | None = None
    num_experts_per_tok: Experts | None = None
    moe_intermediate_size: Intermediate | None = None
    num_shared_experts: Experts | None = None
    first_k_dense_replace: LayerIndex | None = None
    num_kv_shared_layers: LayerIndex | None = None
    rope_cache_bytes: RopeCacheBytes | None = None
    unquantized_parameters: RopeCacheBytes | None = None
    num_nextn_predict_layers: LayerIndex | None = None
    encoder_parameters: Annotated[int, Field(ge=0, le=bounds.MAX_PARAMETERS)] | None = None
    mm_tokens_per_item: Annotated[int, Field(ge=1, le=bounds.MAX_CONTEXT_TOKENS)] | None = None
    mm_pixels_per_token: Annotated[int, Field(ge=1, le=bounds.MAX_CONTEXT_TOKENS)] | None = None
    config_head_dim: HeadDim | None = None
    full_attention_head_dim: HeadDim | None = None
    full_attention_kv_heads: Heads | None = None
    state: StateFields | None = None
    quantization: QuantizationName | None = None
    tie_word_embeddings: bool | None = None
    model_type: Annotated[str, StringConstraints(max_length=64)] | None = None
    architecture: Annotated[str, StringConstraints(max_length=128)] | None = None


class ModelRead(ModelCreate, Provenance):
    model_config = ConfigDict(from_attributes=True, extra="ignore", defer_build=True)
    _check_text: ClassVar[bool] = False


class ModelImport(Schema):
    """``POST /v1/models/import``: a Hugging Face ``config.json`` and the catalog metadata it lacks."""

    name: Slug
    hf_config: dict[str, Any] = Field(description="the model's config.json, as published on Hugging Face")
    hf_id: Annotated[str, StringConstraints(max_length=200, pattern=r"^[\w.\-]+(/[\w.\-]+)?$")] | None = None
    aliases: list[Annotated[str, StringConstraints(max_length=200, pattern=r"^[\w.\-]+(/[\w.\-]+)?$")]] = (
        Field(default_factory=list)
    )
    family: Annotated[str, StringConstraints(max_length=64)] | None = None
    num_parameters: Parameters | None = Field(
        default=None, description="published count; derived from the config when absent"
    )
    num_active_parameters: Parameters | None = None
    source: Text | None = Field(default=None, description="defaults to the Hugging Face page of hf_id")
    notes: Text | None = None


class ModelImportResult(Schema):
    model: ModelRead | ModelCreate
    interpretation: list[str] = Field(description="how each ambiguous key of the config was read")
    stored: bool
