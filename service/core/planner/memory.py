"""Stages 2 and 3, weights and the budget: what each GPU loads, and what is left for the KV cache.

Per pipeline stage (one GPU of it)::

    budget    = ceil(total × gpu_memory_utilization)       (0.15+; the float before)
    available = budget − weights − activation peak − non-torch − CUDA graphs (0.20+)

or exactly ``--kv-cache-memory-bytes`` when given (vLLM then skips profiling). The overhead terms are estimates
with a band (``service.core.overheads``), so ``available`` comes with a low and a high end. Every worker
profiles its own device (``gpu_worker.determine_available_memory``: ``requested_memory`` is that device's total ×
utilisation), so stages on different GPUs each get their own GPU's budget.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

from service.core.overheads import Estimate, Overheads, estimate_overheads, nvls_fabric
from service.core.planner.settings import Settings, is_datacenter_blackwell
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
        if settings.kv_cache_memory_bytes is not None:
            available = low = high = settings.kv_cache_memory_bytes
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
            )
        )
    return MemoryBudget(
        total_bytes=stages[0].total_bytes, budget_bytes=stages[0].budget_bytes, stages=tuple(stages)
    )


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
