"""Weight memory per GPU: parameters × bytes per parameter, split the way vLLM shards them.

vLLM charges the bytes it measures while loading (``Model loading took X GiB``); we re-derive them:

* The published parameter count is split into the token embedding and LM head (vocab padded to a multiple of
  64 and sharded by TP, ``VocabParallelEmbedding``), small replicated tensors (norms, MoE router), and the
  linear layers (sharded by TP; K/V projections replicated when TP exceeds the KV heads).
* Quantisation changes only the linear layers' bytes (embeddings, LM head, norms and router stay in the model
  dtype), and not those the checkpoint lists as unconverted (``ModelSpec.unquantized_parameters``: Meta's FP8
  Llama 3.1 405B keeps every attention block and the first and last layers in bf16). Bytes per parameter come from the layouts in vLLM's ``create_weights`` methods:
  AWQ/GPTQ int4 with group size 128 store 4-bit weights + fp16 scales + 4-bit zeros per group:
  0.5 + (2 + 0.5) / 128 ≈ 0.5195 B; fp8 stores 1 B + one fp32 scale per 128 × 128 block; MXFP4 (gpt-oss
  experts only) 4 bits + one 8-bit scale per 32 → 0.53125 B; NVFP4 4 bits + one fp8 scale per 16 → 0.5625 B.
* MXFP4 experts are allocated padded, and the padding depends on the kernel backend vLLM picks for the GPU
  (``quantization/mxfp4.py::Mxfp4MoEMethod.create_weights`` / ``get_mxfp4_backend``): Marlin (Ampere, Ada,
  consumer Blackwell) rounds each rank's expert width up to 128 and the hidden size up to 256; FlashInfer on
  data-centre Blackwell rounds both up to 256; on Hopper the Triton backend allocates width/64 but its swizzled
  layout ends up ≈ width rounded to 256 (the recorded H100 loads), which is also the rule when the GPU is unknown.
* RoPE cos/sin caches (``ModelSpec.rope_cache_bytes``) are buffers built at model construction, so they load
  with the weights; every rank and stage holds them whole (Gemma 3 4B: 0.56 GiB of its logged 8.58 GiB).
* Pipeline parallelism gives each stage its layers; the embedding lives on the first stage and the LM head on
  the last (both, when tied, since the last stage needs the weights too).

Worked check: Llama-3.1-8B, 8,030,261,248 parameters × 2 B = 14.96 GiB; vLLM logs 14.99 GiB.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from service.core.dtypes import MODEL_DTYPE_BYTES, normalize_model_dtype
from service.core.errors import InvalidSpec, StartRefusal
from service.core.specs import ModelSpec
from service.core.units import cdiv

VOCAB_PADDING = 64  # vllm/model_executor/layers/vocab_parallel_embedding.py::DEFAULT_VOCAB_PADDING_SIZE


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantScheme:
    name: str
    bytes_per_param: float
    experts_only: bool = False  # MXFP4 in gpt-oss quantises only the MoE experts
    pad_intermediate_to: int | None = None  # kernels pad each rank's expert width (MXFP4: 256)
    description: str = ""


QUANT_SCHEMES: dict[str, QuantScheme] = {
    "fp8": QuantScheme(
        name="fp8", bytes_per_param=1 + 4 / (128 * 128), description="1 B + fp32 scale per 128×128 block"
    ),
    "int8": QuantScheme(
        name="int8", bytes_per_param=1 + 4 / 4096, description="1 B + per-channel fp32 scales"
    ),
    "awq": QuantScheme(
        name="awq", bytes_per_param=0.5 + 2.5 / 128, description="4-bit + fp16 scale and 4-bit zero per 128"
    ),
    "gptq": QuantScheme(
        name="gptq", bytes_per_param=0.5 + 2.5 / 128, description="4-bit + fp16 scale and 4-bit zero per 128"
    ),
    "int4": QuantScheme(
        name="int4", bytes_per_param=0.5 + 2.5 / 128, description="4-bit weights, group size 128"
    ),
    "gptq-int8": QuantScheme(
        name="gptq-int8", bytes_per_param=1 + 2.5 / 128, description="8-bit GPTQ, group size 128"
    ),
    "mxfp4": QuantScheme(
        name="mxfp4",
        bytes_per_param=0.5 + 1 / 32,
        experts_only=True,
        pad_intermediate_to=256,
        description="4-bit + 8-bit scale per 32; expert width padded to 256",
    ),
    "nvfp4": QuantScheme(name="nvfp4", bytes_per_param=0.5 + 1 / 16, description="4-bit + fp8 scale per 16"),
    "bitsandbytes": QuantScheme(
        name="bitsandbytes", bytes_per_param=0.5 + 4 / 64, description="NF4 + fp32 absmax per 64"
    ),
    "experts_int8": QuantScheme(
        name="experts_int8", bytes_per_param=1 + 4 / 4096, experts_only=True, description="int8 MoE experts"
    ),
}

_QUANT_ALIASES = {
    "awq_marlin": "awq",
    "gptq_marlin": "gptq",
    "marlin": "gptq",
    "fbgemm_fp8": "fp8",
    "modelopt": "fp8",
    "ptpc_fp8": "fp8",
    "modelopt_fp4": "nvfp4",
    "w8a8": "int8",
    "compressed-tensors": "int8",
    "gguf": "int4",
}


@lru_cache(maxsize=256)
def resolve_quantization(value: str | None, *, native: str | None = None) -> QuantScheme | None:
    """The scheme for ``--quantization`` (``None`` → the checkpoint's own, if any; ``none`` → unquantised)."""
    if value is None:
        value = native
    if value is None or value.strip().lower() in ("none", "auto", ""):
        return None
    key = value.strip().lower()
    key = _QUANT_ALIASES.get(key, key)
    if key.startswith("awq") or key.startswith("gptq"):
        key = "gptq-int8" if key.endswith("int8") else key.split("-")[0]
    try:
        return QUANT_SCHEMES[key]
    except KeyError:
        allowed = ", ".join(sorted({*QUANT_SCHEMES, *_QUANT_ALIASES}))
        raise InvalidSpec(
            f"unknown quantization {value!r}; expected one of {allowed}", field="quantization"
        ) from None


def _expert_padding(quantization: QuantScheme, compute_capability: str | None) -> tuple[int, int | None]:
    """(expert-width alignment, hidden alignment) of the padded MXFP4 expert tensors (module docstring)."""
    default = quantization.pad_intermediate_to or 1
    if quantization.name != "mxfp4" or not compute_capability:
        return default, None
    try:
        major = int(compute_capability.split(".")[0])
    except ValueError:
        return default, None  # ROCm gfx targets: backend-specific alignment, keep the default
    if major == 9:
        return default, None  # Hopper: Triton backend (see module docstring)
    if major == 10:
        return 256, 256  # data-centre Blackwell: FlashInfer MXFP4 backends
    return 128, 256  # Marlin: n % 256 == 0 and k % 128 == 0 for both expert GEMMs


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightShare:
    """Weight bytes on one GPU of one pipeline stage."""

    stage: int
    layers: tuple[int, int]  # [start, end)
    embedding_bytes: int
    lm_head_bytes: int
    linear_bytes: int
    replicated_bytes: int
    expert_bytes: int = 0  # the MoE experts' part of ``linear_bytes`` (data/expert parallelism re-splits it)

    @property
    def total_bytes(self) -> int:
        return self.embedding_bytes + self.lm_head_bytes + self.linear_bytes + self.replicated_bytes


def pipeline_partition(
    num_layers: int, pipeline_parallel_size: int, layers_per_stage: tuple[int, ...] | None = None
) -> list[tuple[int, int]]:
    """Layer ranges per stage (``vllm/distributed/utils.py::get_pp_indices``).

    Layers are split evenly; the remainder goes to the stages before the last (the last one also runs the
    LM head): 30 layers on 4 stages → 7, 8, 8, 7. ``layers_per_stage`` is ``VLLM_PP_LAYER_PARTITION``
    ("16,32"), taken as given once it names one count per stage and the counts add up to the model's layers.
    """
    if pipeline_parallel_size < 1:
        raise InvalidSpec("must be ≥ 1", field="pipeline_parallel_size")
    if num_layers < pipeline_parallel_size:
        raise InvalidSpec(
            f"({pipeline_parallel_size}) exceeds the model's {num_layers} layers",
            field="pipeline_parallel_size",
        )
    if layers_per_stage is not None:
        sizes = list(layers_per_stage)
        if len(sizes) != pipeline_parallel_size:
            raise StartRefusal(  # get_pp_indices' own ValueError
                f"len(partitions)={len(sizes)} does not match pp_size={pipeline_parallel_size}.",
                field="pipeline_layer_partition",
            )
        if sum(sizes) != num_layers:
            raise StartRefusal(  # get_pp_indices' own ValueError
                f"sum(partitions)={sum(sizes)} does not match num_hidden_layers={num_layers}.",
                field="pipeline_layer_partition",
            )
        if min(sizes) < 1:
            raise InvalidSpec("every stage needs at least one layer", field="pipeline_layer_partition")
    else:
        per = num_layers // pipeline_parallel_size
        sizes = [per] * pipeline_parallel_size
        remaining = num_layers % pipeline_parallel_size
        for i in range(2, remaining + 2):
            sizes[-i] += 1
    ranges, start = [], 0
    for size in sizes:
        ranges.append((start, start + size))
        start += size
    return ranges


@lru_cache(maxsize=4096)
def weight_shares(
    model: ModelSpec,
    *,
    quantization: QuantScheme | None,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    dtype: str | None = None,
    compute_capability: str | None = None,
    runtime_buffers: bool = True,
    layer_partition: tuple[int, ...] | None = None,
) -> tuple[WeightShare, ...]:
    """Bytes of weights one GPU holds, per pipeline stage (see module docstring).

    ``compute_capability`` picks the MXFP4 expert layout of the kernel backend vLLM uses on that GPU;
    ``runtime_buffers`` adds vLLM's RoPE caches (off for the ``ideal`` arithmetic, which has no runtime);
    ``layer_partition`` is ``VLLM_PP_LAYER_PARTITION`` (``pipeline_partition``).
    """
    tp = tensor_parallel_size
    elem = MODEL_DTYPE_BYTES[normalize_model_dtype(dtype or model.torch_dtype)]
    hidden, layers = model.hidden_size, model.num_hidden_layers
    padded_vocab = cdiv(model.vocab_size, VOCAB_PADDING) * VOCAB_PADDING
    embed_params = model.vocab_size * hidden
    lm_head_params = 0 if model.tie_word_embeddings else embed_params
    moe_layers = layers - (model.first_k_dense_replace or 0) if model.is_moe else 0
    router_params = hidden * (model.num_experts or 0) * moe_layers
    norm_params = 2 * hidden * layers + hidden
    linear_params = max(0, model.num_parameters - embed_params - lm_head_params - router_params - norm_params)
    expert_params = 0
    if model.is_moe and model.num_experts:
        per_expert = 3 * hidden * (model.moe_intermediate_size or model.intermediate_size or 0)
        expert_params = min(linear_params, model.num_experts * per_expert * moe_layers)

    expert_padding = 1.0
    if quantization is not None and quantization.pad_intermediate_to and model.is_moe:
        width = (model.moe_intermediate_size or model.intermediate_size or 1) // tp
        pad_width, pad_hidden = _expert_padding(quantization, compute_capability)
        expert_padding = cdiv(width, pad_width) * pad_width / width
        if pad_hidden:
            expert_padding *= cdiv(hidden, pad_hidden) * pad_hidden / hidden

    def linear_bytes(params: float, experts: float, unquantized: float) -> float:
        if quantization is None:
            return params * elem
        if quantization.experts_only:
            return experts * expert_padding * quantization.bytes_per_param + (params - experts) * elem
        kept = min(params, unquantized)  # modules the checkpoint left in the model dtype
        return (params - kept) * quantization.bytes_per_param + kept * elem

    # K/V projections are replicated when TP exceeds the KV heads: each rank holds max(1, kv//tp) heads.
    kv_replica_params = 0.0
    if not model.uses_mla and tp > model.num_key_value_heads:
        kv_per_rank = max(1, model.num_key_value_heads // tp)
        kv_replica_params = (
            2 * hidden * model.head_dim * (kv_per_rank - model.num_key_value_heads / tp) * layers
        )

    shares = []
    ranges = pipeline_partition(layers, pipeline_parallel_size, layer_partition)
    last = len(ranges) - 1
    for stage, (start, end) in enumerate(ranges):
        fraction = (end - start) / layers
        embedding = padded_vocab * hidden * elem // tp if stage == 0 else 0
        # Tied embeddings share one tensor on a single stage; the last stage keeps its own copy under PP.
        needs_head = not model.tie_word_embeddings or pipeline_parallel_size > 1
        lm_head = padded_vocab * hidden * elem // tp if stage == last and needs_head else 0
        stage_experts = expert_params * fraction / tp
        linear = linear_bytes(
            linear_params * fraction / tp + kv_replica_params * fraction,
            stage_experts,
            model.unquantized_parameters * fraction / tp,
        )
        experts = linear_bytes(stage_experts, stage_experts, 0.0) if stage_experts else 0.0
        # RoPE cos/sin caches are buffers every rank and every stage builds in full (``ModelSpec.rope_cache_bytes``).
        replicated = (
            (router_params + 2 * hidden * layers) * fraction * elem
            + (hidden * elem if stage == last else 0)
            + (model.rope_cache_bytes if runtime_buffers else 0)
        )
        shares.append(
            WeightShare(
                stage=stage,
                layers=(start, end),
                embedding_bytes=int(embedding),
                lm_head_bytes=int(lm_head),
                linear_bytes=int(linear),
                replicated_bytes=int(replicated),
                expert_bytes=int(experts),
            )
        )
    return tuple(shares)
