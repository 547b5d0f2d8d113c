"""Roofline estimates of decode and prefill speed for one vLLM replica.

Decode is memory-bandwidth-bound: every step reads the weights held by the GPU plus the KV cache of every
running sequence, so ``step ≥ bytes_read / bandwidth``. Prefill is compute-bound: ``2 × active parameters``
FLOPs per prompt token (plus attention's quadratic term) against the GPU's dense FLOP/s. Tensor parallelism
splits both across ranks and adds two all-reduces of the hidden state per layer over the interconnect.

Peak figures are never reached; the efficiency factors below say how much of the datasheet a well-tuned vLLM
gets and where the number comes from. Every estimate returns the assumptions it used, so a reader can
disagree with one of them.

Worked bound: Llama-3.1-8B on H100 SXM reads 16.06 GB of bf16 weights per decode step at batch 1;
3.35 TB/s ÷ 16.06 GB = 208.6 steps/s is the hard ceiling; at 80 % bandwidth efficiency plus 0.5 ms per step the
estimate is 154 tokens/s (74 % of the ceiling).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from service.core.errors import InvalidSpec
from service.core.specs import GpuSpec, ModelSpec

# Fraction of datasheet memory bandwidth a decode step achieves (STREAM-like reads of large weight matrices
# reach 80-90 % on H100/A100; decode also launches many small kernels). 0.8 is a middle value.
DECODE_BANDWIDTH_EFFICIENCY = 0.8
# Fraction of dense tensor FLOP/s prefill achieves (large GEMMs reach 60-75 %; attention and norms less).
PREFILL_COMPUTE_EFFICIENCY = 0.55
# Per-step fixed cost: scheduler, sampling and kernel launches that CUDA graphs do not hide. With 80 % bandwidth
# efficiency this reproduces a published single-request figure: Llama-3.1-8B bf16 on an A100 40GB with vLLM
# 0.23 decodes ≈ 75 tokens/s (johnmusgrave.com, "vLLM throughput-latency sweep on NVIDIA A100"); the model
# gives 16.06 GB / (1.555 TB/s × 0.8) + 0.5 ms = 13.4 ms → 74.6 tokens/s.
STEP_OVERHEAD_SECONDS = 0.0005
# One all-reduce's latency floor per call (NCCL ring on NVLink/PCIe, small messages).
ALLREDUCE_LATENCY_SECONDS = 8e-6
# Interconnect bandwidth a TP all-reduce achieves, as a fraction of the datasheet figure.
INTERCONNECT_EFFICIENCY = 0.7


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEstimate:
    seconds: float
    memory_seconds: float
    compute_seconds: float
    communication_seconds: float
    overhead_seconds: float
    bytes_read: int
    flops: float
    bound: str  # "memory" | "compute"
    assumptions: tuple[str, ...]


def _active_parameters(model: ModelSpec) -> int:
    return model.num_active_parameters or model.num_parameters


def _experts_touched(model: ModelSpec, batch: int) -> float:
    """Expected distinct experts a batch routes to per MoE layer: E × (1 − (1 − k/E)^B) (uniform routing)."""
    experts = model.num_experts or 1
    top_k = model.num_experts_per_tok or 1
    return experts * (1 - (1 - top_k / experts) ** batch)


def decode_bytes_read(
    model: ModelSpec, *, weights_bytes: int, kv_bytes_per_token: int, batch: int, context_tokens: int
) -> int:
    """Bytes one decode step reads on one GPU: the weights it touches plus every running sequence's KV.

    For MoE only the routed experts are read; ``weights_bytes`` is the GPU's share, so the expert part is
    scaled by the fraction of experts a batch of ``batch`` touches.
    """
    weights = float(weights_bytes)
    if model.is_moe and model.num_experts:
        active_fraction = _active_parameters(model) / model.num_parameters
        dense_part = weights * active_fraction  # attention, shared experts, embeddings, ~k routed experts
        per_expert = (weights - dense_part) / max(1, model.num_experts - (model.num_experts_per_tok or 1))
        weights = dense_part + per_expert * max(
            0.0, _experts_touched(model, batch) - (model.num_experts_per_tok or 1)
        )
    return int(weights + batch * context_tokens * kv_bytes_per_token)


def _allreduce_seconds(model: ModelSpec, gpu: GpuSpec, *, tp: int, tokens: int, dtype_bytes: int) -> float:
    if tp <= 1:
        return 0.0
    link = gpu.interconnect_bandwidth_bytes_per_second
    if not link:
        link = 64 * 10**9  # PCIe 5 x16 both directions when the catalog has no figure
    message = tokens * model.hidden_size * dtype_bytes
    # Ring all-reduce moves 2 (tp − 1) / tp of the message per GPU; two all-reduces per layer.
    per_call = ALLREDUCE_LATENCY_SECONDS + 2 * (tp - 1) / tp * message / (link / 2 * INTERCONNECT_EFFICIENCY)
    return 2 * model.num_hidden_layers * per_call


def _decode_terms(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    weights_bytes: int,
    kv_bytes_per_token: int,
    batch: int,
    context_tokens: int,
    tensor_parallel_size: int,
    dtype_bytes: int,
    fp8_compute: bool,
) -> tuple[int, float, float, float, float]:
    """(bytes read, memory seconds, FLOPs, compute seconds, all-reduce seconds) of one decode step."""
    if batch < 1:
        raise InvalidSpec("must be ≥ 1", field="batch")
    if not gpu.memory_bandwidth_bytes_per_second:
        raise InvalidSpec(
            f"GPU {gpu.name} has no memory bandwidth figure; throughput cannot be estimated", field="gpu"
        )
    bytes_read = decode_bytes_read(
        model,
        weights_bytes=weights_bytes,
        kv_bytes_per_token=kv_bytes_per_token,
        batch=batch,
        context_tokens=context_tokens,
    )
    memory = bytes_read / (gpu.memory_bandwidth_bytes_per_second * DECODE_BANDWIDTH_EFFICIENCY)
    peak = (gpu.fp8_dense_flops_per_second if fp8_compute else None) or gpu.bf16_dense_flops_per_second
    flops = 2.0 * _active_parameters(model) * batch / tensor_parallel_size
    compute = flops / (peak * PREFILL_COMPUTE_EFFICIENCY) if peak else 0.0
    comm = _allreduce_seconds(model, gpu, tp=tensor_parallel_size, tokens=batch, dtype_bytes=dtype_bytes)
    return bytes_read, memory, flops, compute, comm


def decode_step_seconds(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    weights_bytes: int,
    kv_bytes_per_token: int,
    batch: int,
    context_tokens: int,
    tensor_parallel_size: int = 1,
    dtype_bytes: int = 2,
    fp8_compute: bool = False,
) -> float:
    """``decode_step(...).seconds`` without building the explanation (for searches over the batch size)."""
    _, memory, _, compute, comm = _decode_terms(
        model,
        gpu,
        weights_bytes=weights_bytes,
        kv_bytes_per_token=kv_bytes_per_token,
        batch=batch,
        context_tokens=context_tokens,
        tensor_parallel_size=tensor_parallel_size,
        dtype_bytes=dtype_bytes,
        fp8_compute=fp8_compute,
    )
    return max(memory, compute) + comm + STEP_OVERHEAD_SECONDS


def decode_step(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    weights_bytes: int,
    kv_bytes_per_token: int,
    batch: int,
    context_tokens: int,
    tensor_parallel_size: int = 1,
    dtype_bytes: int = 2,
    fp8_compute: bool = False,
) -> StepEstimate:
    """Time of one decode step (= time per output token) at ``batch`` sequences of ``context_tokens`` each."""
    bytes_read, memory, flops, compute, comm = _decode_terms(
        model,
        gpu,
        weights_bytes=weights_bytes,
        kv_bytes_per_token=kv_bytes_per_token,
        batch=batch,
        context_tokens=context_tokens,
        tensor_parallel_size=tensor_parallel_size,
        dtype_bytes=dtype_bytes,
        fp8_compute=fp8_compute,
    )
    seconds = max(memory, compute) + comm + STEP_OVERHEAD_SECONDS
    assert gpu.memory_bandwidth_bytes_per_second is not None
    return StepEstimate(
        seconds=seconds,
        memory_seconds=memory,
        compute_seconds=compute,
        communication_seconds=comm,
        overhead_seconds=STEP_OVERHEAD_SECONDS,
        bytes_read=bytes_read,
        flops=flops,
        bound="memory" if memory >= compute else "compute",
        assumptions=(
            f"decode reads weights + KV at {DECODE_BANDWIDTH_EFFICIENCY:.0%} of {gpu.memory_bandwidth_bytes_per_second / 1e12:.2f} TB/s",
            f"{STEP_OVERHEAD_SECONDS * 1e3:.1f} ms fixed per step (scheduler, sampling, launches)",
            *(
                [
                    f"2 all-reduces per layer over {tensor_parallel_size} GPUs at {INTERCONNECT_EFFICIENCY:.0%} of the link"
                ]
                if tensor_parallel_size > 1
                else []
            ),
        ),
    )


def prefill_seconds(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    prompt_tokens: int,
    weights_bytes: int,
    tensor_parallel_size: int = 1,
    dtype_bytes: int = 2,
    fp8_compute: bool = False,
) -> StepEstimate:
    """Time to process one prompt (compute-bound; attention adds 2·layers·heads·head_dim·P² FLOPs causally)."""
    if prompt_tokens < 1:
        raise InvalidSpec("must be ≥ 1", field="prompt_tokens")
    peak = (gpu.fp8_dense_flops_per_second if fp8_compute else None) or gpu.bf16_dense_flops_per_second
    if not peak:
        raise InvalidSpec(
            f"GPU {gpu.name} has no dense FLOP/s figure; prefill time cannot be estimated", field="gpu"
        )
    linear = 2.0 * _active_parameters(model) * prompt_tokens
    attention = 2.0 * model.num_hidden_layers * model.num_attention_heads * model.head_dim * prompt_tokens**2
    flops = (linear + attention) / tensor_parallel_size
    compute = flops / (peak * PREFILL_COMPUTE_EFFICIENCY)
    memory = (
        weights_bytes / (gpu.memory_bandwidth_bytes_per_second * DECODE_BANDWIDTH_EFFICIENCY)
        if gpu.memory_bandwidth_bytes_per_second
        else 0.0
    )
    comm = _allreduce_seconds(
        model, gpu, tp=tensor_parallel_size, tokens=prompt_tokens, dtype_bytes=dtype_bytes
    )
    seconds = max(compute, memory) + comm + STEP_OVERHEAD_SECONDS
    return StepEstimate(
        seconds=seconds,
        memory_seconds=memory,
        compute_seconds=compute,
        communication_seconds=comm,
        overhead_seconds=STEP_OVERHEAD_SECONDS,
        bytes_read=weights_bytes,
        flops=flops,
        bound="compute" if compute >= memory else "memory",
        assumptions=(f"prefill at {PREFILL_COMPUTE_EFFICIENCY:.0%} of {peak / 1e12:.0f} dense TFLOP/s",),
    )


def largest_batch_within(tpot_seconds: float, step: Callable[[int], float], upper: int) -> int:
    """Largest batch in [1, upper] whose decode step stays within ``tpot_seconds`` (0 when even 1 misses).

    Step time grows monotonically with the batch (more KV to read), so a binary search suffices.
    """
    if upper < 1 or step(1) > tpot_seconds:
        return 0
    lo, hi = 1, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if step(mid) <= tpot_seconds:
            lo = mid
        else:
            hi = mid - 1
    return lo


def littles_law_concurrency(requests_per_second: float, latency_seconds: float) -> float:
    """L = λ × W: requests in flight for an arrival rate and the time each spends in the system."""
    return requests_per_second * latency_seconds


def ceil_div_float(value: float, per_unit: float) -> int:
    return math.ceil(value / per_unit - 1e-9) if per_unit > 0 else 0


def max_batch_within_tpot(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    tpot_seconds: float,
    upper: int,
    weights_bytes: int,
    kv_bytes_per_token: int,
    context_tokens: int,
    tensor_parallel_size: int = 1,
    dtype_bytes: int = 2,
    fp8_compute: bool = False,
) -> int:
    """Largest batch in [0, upper] whose decode step fits ``tpot_seconds``.

    For dense models every term of the step is linear in the batch B — memory ``m0 + m1·B``, compute ``c1·B``,
    all-reduce ``a0 + a1·B`` — so ``max(m0 + m1·B, c1·B) + a0 + a1·B + overhead ≤ T`` is solved directly. MoE
    reads more experts as the batch grows (not linear), so it falls back to a binary search.
    """

    def step(batch: int) -> float:
        return decode_step_seconds(
            model,
            gpu,
            weights_bytes=weights_bytes,
            kv_bytes_per_token=kv_bytes_per_token,
            batch=batch,
            context_tokens=context_tokens,
            tensor_parallel_size=tensor_parallel_size,
            dtype_bytes=dtype_bytes,
            fp8_compute=fp8_compute,
        )

    bandwidth = gpu.memory_bandwidth_bytes_per_second
    if model.is_moe or not bandwidth:
        return largest_batch_within(tpot_seconds, step, upper)
    memory_rate = bandwidth * DECODE_BANDWIDTH_EFFICIENCY
    m0 = weights_bytes / memory_rate
    m1 = context_tokens * kv_bytes_per_token / memory_rate
    peak = (gpu.fp8_dense_flops_per_second if fp8_compute else None) or gpu.bf16_dense_flops_per_second
    c1 = (
        2.0 * _active_parameters(model) / tensor_parallel_size / (peak * PREFILL_COMPUTE_EFFICIENCY)
        if peak
        else 0.0
    )
    a0 = _allreduce_seconds(model, gpu, tp=tensor_parallel_size, tokens=0, dtype_bytes=dtype_bytes)
    a1 = _allreduce_seconds(model, gpu, tp=tensor_parallel_size, tokens=1, dtype_bytes=dtype_bytes) - a0
    budget = tpot_seconds - STEP_OVERHEAD_SECONDS - a0
    bounds = [(budget - m0) / (m1 + a1) if m1 + a1 > 0 else math.inf]
    if c1 + a1 > 0:
        bounds.append(budget / (c1 + a1))
    batch = min(upper, math.floor(min(bounds))) if min(bounds) != math.inf else upper
    while batch > 0 and step(batch) > tpot_seconds:  # guard against rounding at the boundary
        batch -= 1
    return max(0, batch)
