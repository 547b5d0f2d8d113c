"""Stages 2 and 3, weights and the budget: what each GPU loads, and what is left for the KV cache.

Per pipeline stage (one GPU of it)::

    budget    = ceil(total × gpu_memory_utilization)       (0.15+; the float before)
    available = budget − weights − activation peak − non-torch − CUDA graphs (0.20+)

or exactly ``--kv-cache-memory-bytes`` when given (vLLM then skips profiling). From 0.34 on CUDA and ROCm the
extensible KV cache is committed after warm-up and CUDA-graph capture, from the memory measured then
(``measure_kv_cache_bytes``, vllm/v1/worker/extensible_kv_cache.py, 0.34.0)::

    non-KV    = weights + non-torch + CUDA graphs (measured after capture; ``profile_cudagraph_memory`` is 0)
    margin    = max(1 GiB (3 GiB on ROCm), 0.75 × activation peak)
    available = min(budget − non-KV, free at start − non-KV − margin) − activation peak

with the budget ``ceil(total × 1.0)`` when ``--gpu-memory-utilization`` is unset. The memory held before the
start-up snapshot (CUDA context) is not modelled, so "free at start" is the GPU's total; the low end of the
band allows 1 GiB of it (``START_SNAPSHOT_BAND_BYTES``).

The overhead terms are estimates with a band (``service.core.overheads``), so ``available`` comes with a low and
a high end. Every worker profiles its own device (``gpu_worker.determine_available_memory``: ``requested_memory``
is that device's total × utilisation), so stages on different GPUs each get their own GPU's budget.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

from service.core.overheads import Estimate, Overheads, estimate_overheads, nvls_fabric
from service.core.planner.settings import Settings, is_datacenter_blackwell
from service.core.specs import GpuSpec
from service.core.weights import WeightShare, weight_shares


def stage_weights(settings: Settings) -> tuple[WeightShare, ...]:
    """Stage 2: the weights on one GPU of every pipeline stage (``service.core.weights``)."""
    gpu = settings.gpu
    return tuple(
        weight_shares(
            settings.model,
            quantization=settings.quantization,
            tensor_parallel_size=settings.tensor_parallel_size,
            pipeline_parallel_size=settings.pipeline_parallel_size,
            dtype=settings.dtype,
            compute_capability=gpu.compute_capability if gpu else None,
            runtime_buffers=settings.engine.overheads,
            layer_partition=settings.layer_partition,
        )
    )


class StageMemory(NamedTuple):
    """One GPU of one pipeline stage: its weights, its runtime overheads and what is left for blocks."""

    stage: int
    layers: tuple[int, int]  # [start, end)
    total_bytes: int  # this stage's GPU
    budget_bytes: float
    weights_bytes: int
    overheads: Overheads
    available_bytes: int
    available_low_bytes: int
    available_high_bytes: int
    margin_bytes: int = 0  # the extensible KV cache's sizing margin (0.34+), 0 otherwise
    # The extensible KV cache's capacity before warm-up (0.34+; ``determine_available_memory`` with no CUDA-graph
    # estimate): budget − weights − non-torch − activation peak. The refusal check runs on it first.
    tentative_bytes: int | None = None


class MemoryBudget(NamedTuple):
    total_bytes: int  # the (first stage's) GPU's memory (0 without a GPU)
    budget_bytes: float  # total × utilisation: an int from 0.15 (ceil), the float before
    stages: tuple[StageMemory, ...]


def memory_budget(
    settings: Settings,
    shares: tuple[WeightShare, ...],
    weight_delta: tuple[int, ...] | None = None,
    extra_activation: int = 0,
) -> MemoryBudget:
    """Stage 3: the budget and, per pipeline stage, the overheads charged before the KV cache.

    ``weight_delta`` is what the serving features add to (LoRA buffers, draft weights) or take from (CPU
    offload, experts over DP) each stage's weights, ``extra_activation`` what the first stage's profile run adds
    (the multimodal encoder's dummy batch) (``features.feature_costs``)."""
    engine, gpu = settings.engine, settings.gpu
    util = settings.gpu_memory_utilization
    totals = [g.memory_bytes for g in settings.stage_gpus] if settings.stage_gpus else None
    blackwell = is_datacenter_blackwell(gpu)
    nvls = gpu is not None and nvls_fabric(
        gpu.compute_capability, gpu.interconnect_bandwidth_bytes_per_second
    )
    stages: list[StageMemory] = []
    for share in shares:
        total = totals[share.stage] if totals else (gpu.memory_bytes if gpu else 0)
        budget = math.ceil(total * util) if engine.ceil_requested else total * util
        weights = share.total_bytes + (weight_delta[share.stage] if weight_delta else 0)
        overheads = estimate_overheads(
            settings.model,
            engine=engine,
            tensor_parallel_size=settings.tensor_parallel_size,
            pipeline_parallel_size=settings.pipeline_parallel_size,
            layers_on_rank=share.layers[1] - share.layers[0],
            last_stage=share.stage == len(shares) - 1,
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            enforce_eager=settings.enforce_eager or settings.device == "cpu",
            dtype=settings.dtype,
            blackwell=blackwell,
            nvls=nvls,
            quantization=settings.quantization.name if settings.quantization else None,
            data_parallel_size=settings.features.data_parallel_size if settings.features else 1,
            flashinfer_sampler=settings.features.flashinfer_sampler if settings.features else True,
            coefficients=settings.coefficients,
        )
        if extra_activation and share.stage == 0:
            overheads = _with_encoder_profile(overheads, extra_activation)
        margin, tentative = 0, None
        if settings.kv_cache_memory_bytes is not None:
            available = low = high = settings.kv_cache_memory_bytes
        elif settings.extensible_kv_cache:
            floor = _margin_floor(gpu)
            # The central estimate, then the low end from the high overheads and the high end from the low ones.
            sized = [
                measured_kv_cache_bytes(
                    budget=budget,
                    total=total - (START_SNAPSHOT_BAND_BYTES if end == "high" else 0),
                    weights=weights,
                    non_torch=getattr(overheads.non_torch, end),
                    cudagraph=getattr(overheads.cudagraph, end),
                    activation=getattr(overheads.activation, end),
                    margin_floor=floor,
                )
                for end in ("bytes", "high", "low")
            ]
            (available, margin), (low, _), (high, _) = sized
            tentative = int(budget - weights - overheads.non_torch.bytes - overheads.activation.bytes)
        else:
            free = budget - weights
            available = int(free - overheads.total_bytes)
            low = int(free - overheads.high_bytes)
            high = int(free - overheads.low_bytes)
        stages.append(
            StageMemory(
                stage=share.stage,
                layers=share.layers,
                total_bytes=total,
                budget_bytes=budget,
                weights_bytes=weights,
                overheads=overheads,
                available_bytes=available,
                available_low_bytes=low,
                available_high_bytes=high,
                margin_bytes=margin,
                tentative_bytes=tentative,
            )
        )
    return MemoryBudget(
        total_bytes=stages[0].total_bytes, budget_bytes=stages[0].budget_bytes, stages=tuple(stages)
    )


# vllm/v1/worker/extensible_kv_cache.py, 0.34.0: KV_CACHE_MARGIN_FLOOR_BYTES = (3 if ROCm else 1) << 30 and
# KV_CACHE_MARGIN_FRACTION = 0.75.
MARGIN_FLOOR_BYTES = 1 << 30
# The free memory at start (``init_free_memory``) is taken as the GPU's total: what the device holds before vLLM's
# start-up snapshot (the CUDA context, another process) is not modelled, so the central estimate of 0.34's
# extensible cache is high by that much. The low end of the band allows 1 GiB of it (not fitted: a CUDA context
# is a few hundred MiB), so a promise within that of the estimate is reported as inside it, not as kept.
START_SNAPSHOT_BAND_BYTES = 1 << 30
ROCM_MARGIN_FLOOR_BYTES = 3 << 30
MARGIN_FRACTION = 0.75


def _margin_floor(gpu: GpuSpec | None) -> int:
    capability = (gpu.compute_capability if gpu else None) or ""
    return ROCM_MARGIN_FLOOR_BYTES if capability.startswith("gfx") else MARGIN_FLOOR_BYTES


def measured_kv_cache_bytes(
    *,
    budget: float,
    total: int,
    weights: int,
    non_torch: int,
    cudagraph: int,
    activation: int,
    margin_floor: int = MARGIN_FLOOR_BYTES,
) -> tuple[int, int]:
    """(KV cache bytes, margin) of the extensible KV cache (``measure_kv_cache_bytes``, 0.34.0).

    vLLM measures after warm-up: ``non_kv_used`` = the drop in free memory less the committed blocks (weights,
    non-torch memory, the captured graphs), ``headroom`` = what is free plus the committed blocks (the free memory
    at start less ``non_kv_used``). It keeps ``max(floor, 0.75 × transient peak)`` of the headroom as a margin
    and then the transient peak itself (the profiled activation peak: ``reserved_headroom_bytes`` starts at
    ``peak_activation_memory``, which has no CUDA-graph estimate under this cache), so::

        min(budget − non_kv_used, headroom − margin) − transient peak

    vLLM clamps it at 0; the sign is kept here, as for the other releases, and either way no block fits.
    """
    non_kv_used = weights + non_torch + cudagraph
    margin = max(margin_floor, int(activation * MARGIN_FRACTION))
    available = min(budget - non_kv_used, total - non_kv_used - margin) - activation
    return int(available), margin


def _with_encoder_profile(overheads: Overheads, extra: int) -> Overheads:
    """The profile peak with the multimodal encoder's dummy batch held in the encoder cache on top."""
    act = overheads.activation
    return replace(
        overheads,
        activation=Estimate(
            bytes=act.bytes + extra,
            low=act.low + extra,
            high=act.high + extra,
            formula=f"{act.formula} + encoder cache of the profile batch",
        ),
    )
