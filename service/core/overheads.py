"""What vLLM subtracts from its budget besides weights: activation peak, non-torch memory, CUDA graphs.

These terms are *estimates* (vLLM measures them on the device; we cannot), so each comes with a band. The
shapes follow what vLLM actually runs (``vllm-source-notes`` §2–3); the coefficients are calibrated against
recorded start-up logs (``tests/data``; ``make accuracy`` fits on one part and reports on the rest).

Activation peak (``GPUModelRunner.profile_run``): one forward pass of ``T = max_num_batched_tokens`` tokens
spread over ``R = min(T, max_num_seqs)`` requests, attention skipped, then a sampler warm-up on ``R × vocab``
fp32 logits through the top-k/top-p sort path. The larger of the two transients dominates::

    forward  ≈ T × (2·hidden + q_out + kv_out + 3·ffn_per_rank) × dtype_bytes   (+ fused-MoE caches)
    sampler  ≈ R × vocab × SAMPLER_BYTES_PER_LOGIT

Non-torch memory: cuBLAS/attention workspaces, plus NCCL and custom all-reduce buffers where the release
charges them (V0 and 0.10, whose memory snapshot predates distributed init).

CUDA graphs (0.20+, not with ``--enforce-eager``): ``profile_cudagraph_memory`` captures the two largest sizes
per mode and extrapolates: ``first + per_graph × (n − 1)`` per mode. We model ``per_graph`` as a per-layer
constant (graph nodes scale with layers) and ``first`` as the largest capture's activations.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from service.core.dtypes import MODEL_DTYPE_BYTES, normalize_model_dtype
from service.core.engines import EngineProfile
from service.core.kv_cache import kv_heads_per_rank
from service.core.specs import ModelSpec
from service.core.units import GIB, MIB


@dataclass(frozen=True, slots=True, kw_only=True)
class OverheadCoefficients:
    """Calibration constants (see ``bench/accuracy.py`` for how they are fitted and checked)."""

    activation_scale: float = 1.0  # multiplies the forward/sampler transient model
    sampler_bytes_per_logit: float = (
        22.0  # model-dtype logits + fp32 copy + sorted fp32 + int64 index + probs
    )
    non_torch_bytes: int = int(0.25 * GIB)  # cuBLAS / attention workspaces on one GPU
    nccl_bytes: int = int(0.55 * GIB)  # NCCL + custom all-reduce buffers when TP/PP > 1 and charged
    consumed_extra_bytes: int = int(0.15 * GIB)  # 0.28+: allocator fragmentation charged via free memory
    cudagraph_bytes_per_layer_per_graph: int = 96 * 1024
    activation_band: tuple[float, float] = (0.6, 1.6)
    non_torch_band_bytes: tuple[int, int] = (int(0.15 * GIB), int(0.5 * GIB))
    cudagraph_band: tuple[float, float] = (0.5, 2.0)


DEFAULT_COEFFICIENTS = OverheadCoefficients()


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """A byte estimate with its plausible range and how it was derived."""

    bytes: int
    low: int
    high: int
    formula: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Overheads:
    activation: Estimate
    non_torch: Estimate
    cudagraph: Estimate

    @property
    def total_bytes(self) -> int:
        return self.activation.bytes + self.non_torch.bytes + self.cudagraph.bytes

    @property
    def low_bytes(self) -> int:
        return self.activation.low + self.non_torch.low + self.cudagraph.low

    @property
    def high_bytes(self) -> int:
        return self.activation.high + self.non_torch.high + self.cudagraph.high


ZERO = Estimate(bytes=0, low=0, high=0, formula="not charged")


@lru_cache(maxsize=256)
def cudagraph_capture_sizes(
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    version: tuple[int, int] | None,
    blackwell: bool = False,
) -> tuple[int, ...]:
    """vLLM's default capture sizes (``VllmConfig._set_cudagraph_sizes``).

    0.10/0.11: ``[1, 2, 4] + 8·k`` up to ``min(2·max_num_seqs, 512)`` (67 sizes at 512); 0.12+: step 8 to 248
    then step 16 (51 sizes at 512); 0.28+ on data-centre Blackwell the cap is 1024. Capped by the batched tokens.
    """
    cap = 1024 if blackwell and version is not None and version >= (0, 28) else 512
    largest = min(2 * max_num_seqs, cap, max_num_batched_tokens)
    if version is not None and version < (0, 12):
        sizes = [1, 2, 4, *range(8, largest + 1, 8)]
    else:
        sizes = [1, 2, 4, *range(8, min(largest + 1, 256), 8), *range(256, largest + 1, 16)]
    return tuple(s for s in sizes if s <= largest)


def estimate_overheads(
    model: ModelSpec,
    *,
    engine: EngineProfile,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    layers_on_rank: int,
    last_stage: bool,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    enforce_eager: bool,
    dtype: str | None = None,
    blackwell: bool = False,
    coefficients: OverheadCoefficients = DEFAULT_COEFFICIENTS,
) -> Overheads:
    """Activation, non-torch and CUDA-graph bytes one GPU charges before the KV cache (module docstring)."""
    if not engine.overheads:
        return Overheads(activation=ZERO, non_torch=ZERO, cudagraph=ZERO)
    c = coefficients
    tp = tensor_parallel_size
    b = MODEL_DTYPE_BYTES[normalize_model_dtype(dtype or model.torch_dtype)]
    tokens = max_num_batched_tokens
    requests = min(tokens, max_num_seqs)
    hidden = model.hidden_size
    if model.uses_mla:
        q_out = (
            model.num_attention_heads * ((model.qk_nope_head_dim or 0) + (model.qk_rope_head_dim or 0)) // tp
        )
        kv_out = (model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0)
    else:
        q_out = model.num_attention_heads * model.head_dim // tp
        kv_out = 2 * kv_heads_per_rank(model.num_key_value_heads, tp) * model.head_dim
    if model.is_moe:
        top_k = model.num_experts_per_tok or 1
        width = (model.moe_intermediate_size or model.intermediate_size or 4 * hidden) // tp
        ffn = top_k * width
        moe_cache = tokens * top_k * (3 * width + hidden) * b  # fused_moe intermediate caches
    else:
        ffn = (model.intermediate_size or 4 * hidden) // tp
        moe_cache = 0
    forward = tokens * (2 * hidden + q_out + kv_out + 3 * ffn) * b + moe_cache
    sampler = int(requests * model.vocab_size * c.sampler_bytes_per_logit) if last_stage else 0
    persistent = tokens * hidden * b
    peak = int(c.activation_scale * (max(forward, sampler) + persistent))
    low_a, high_a = c.activation_band
    which = "sampler" if sampler > forward else "forward"
    activation = Estimate(
        bytes=peak,
        low=int(peak * low_a),
        high=int(peak * high_a),
        formula=(
            f"max(forward {forward / GIB:.2f} GiB, sampler {sampler / GIB:.2f} GiB) + inputs {persistent / GIB:.2f} GiB; "
            f"{which} dominates (T={tokens} batched tokens, R={requests} requests, vocab {model.vocab_size})"
        ),
    )

    non_torch_bytes = c.non_torch_bytes
    parts = [f"workspaces {c.non_torch_bytes / GIB:.2f} GiB"]
    if engine.charges_nccl and tp * pipeline_parallel_size > 1:
        non_torch_bytes += c.nccl_bytes
        parts.append(f"NCCL/all-reduce buffers {c.nccl_bytes / GIB:.2f} GiB (charged by this release)")
    if engine.consumed_memory_model:
        non_torch_bytes += c.consumed_extra_bytes
        parts.append(
            f"allocator slack {c.consumed_extra_bytes / GIB:.2f} GiB (0.28+ counts free-memory drop)"
        )
    non_torch = Estimate(
        bytes=non_torch_bytes,
        low=c.non_torch_band_bytes[0],
        high=non_torch_bytes + c.non_torch_band_bytes[1],
        formula=" + ".join(parts),
    )

    if not engine.subtracts_cudagraphs or enforce_eager:
        reason = (
            "--enforce-eager: no CUDA graphs"
            if enforce_eager
            else "CUDA graphs use the 1 − utilisation headroom in this release"
        )
        cudagraph = Estimate(bytes=0, low=0, high=0, formula=reason)
    else:
        sizes = cudagraph_capture_sizes(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=tokens,
            version=engine.version,
            blackwell=blackwell,
        )
        full = [s for s in sizes if s <= max_num_seqs]  # FULL graphs: uniform-decode batches
        per_graph = max(MIB, c.cudagraph_bytes_per_layer_per_graph * layers_on_rank)
        first = max(sizes) * (2 * hidden + q_out + kv_out + 3 * ffn) * b if sizes else 0
        graphs = max(0, len(sizes) - 1) + max(0, len(full) - 1)
        total = int(first + per_graph * graphs)
        low_c, high_c = c.cudagraph_band
        cudagraph = Estimate(
            bytes=total,
            low=int(total * low_c),
            high=int(total * high_c),
            formula=(
                f"largest capture {first / MIB:.0f} MiB + {graphs} more graphs × {per_graph / MIB:.1f} MiB "
                f"({len(sizes)} piecewise sizes up to {max(sizes) if sizes else 0}, {len(full)} full)"
            ),
        )
    return Overheads(activation=activation, non_torch=non_torch, cudagraph=cudagraph)
