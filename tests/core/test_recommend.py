"""Recommendations on hand-computed cases: replicas, max_num_seqs limits, SLOs, TP choice and the roofline bound."""

from __future__ import annotations

import dataclasses
import math

import pytest

from service.core.planner import PlanRequest, with_changes
from service.core.recommend import Workload, evaluate, rank, recommend, sweep
from service.core.specs import GpuSpec, ModelSpec
from service.core.throughput import STEP_OVERHEAD_SECONDS, decode_step
from service.core.units import GIB
from tests.core.model_cards import LLAMA_31_8B as LLAMA_8B

H100 = GpuSpec(
    name="h100",
    memory_bytes=int(79.22 * GIB),
    memory_bandwidth_bytes_per_second=3_350_000_000_000,
    bf16_dense_flops_per_second=989_500_000_000_000,
    interconnect_bandwidth_bytes_per_second=900_000_000_000,
    price_per_hour_usd=4.0,
    compute_capability="9.0",
)


def exact(**kw: object) -> PlanRequest:
    """A plan whose KV budget is given, so block counts are exact and hand-computable."""
    base: dict[str, object] = {
        "model": LLAMA_8B,
        "gpu": H100,
        "engine": "vllm-0.33",
        "kv_cache_memory_bytes": 55 * GIB,
        "block_size": 16,
    }
    return PlanRequest(**(base | kw))  # type: ignore[arg-type]


def test_batch_one_decode_stays_under_the_bandwidth_limit() -> None:
    weights = 8_030_261_248 * 2  # bf16 (the catalog's count; the plan adds vocab padding)
    step = decode_step(
        LLAMA_8B, H100, weights_bytes=weights, kv_bytes_per_token=131_072, batch=1, context_tokens=1
    )
    limit = (
        H100.memory_bandwidth_bytes_per_second / weights
    )  # 208.6 tokens/s: one full read of the weights per token
    assert 1 / step.seconds < limit
    # by hand: 16.06 GB / (3.35 TB/s × 0.8) = 5.99 ms, + 1.5 ms fixed per step
    assert step.seconds == pytest.approx(weights / (3.35e12 * 0.8) + STEP_OVERHEAD_SECONDS, rel=1e-3)
    assert step.bound == "memory"


def test_replicas_for_concurrent_users_come_from_the_kv_limit_with_headroom() -> None:
    # 55 GiB / 2 MiB per block = 28,160 blocks; a 1,000 + 200 token request needs cdiv(1,200, 16) = 75 blocks
    # → 375 requests per replica; 1,000 users × 1.2 headroom / 375 = 3.2 → 4 replicas.
    option = evaluate(
        exact(), Workload(concurrent_users=1000, prompt_tokens=1000, output_tokens=200, headroom_ratio=0.2)
    )
    assert option.feasible
    assert option.kv_concurrency == 28_160 // 75 == 375
    assert option.max_num_seqs == 375
    assert option.replicas == math.ceil(1000 * 1.2 / 375) == 4
    assert option.gpus == 4
    assert option.cost_per_hour_usd == pytest.approx(16.0)


def test_replicas_for_a_request_rate_follow_littles_law() -> None:
    workload = Workload(requests_per_second=300, prompt_tokens=1000, output_tokens=200, headroom_ratio=0.25)
    option = evaluate(exact(), workload)
    assert (
        option.feasible
        and option.tpot_seconds
        and option.ttft_seconds
        and option.requests_per_second_per_replica
    )
    per_request = option.ttft_seconds + 200 * option.tpot_seconds  # W: time one request spends in the system
    assert option.requests_per_second_per_replica == pytest.approx(option.max_num_seqs / per_request)
    assert option.replicas == math.ceil(300 * 1.25 / option.requests_per_second_per_replica)


def test_max_num_seqs_never_exceeds_vllms_default_unless_asked() -> None:
    small = Workload(
        concurrent_users=10, prompt_tokens=100, output_tokens=50
    )  # 28,160 / cdiv(150, 16) = 2,816
    default = evaluate(exact(), small)
    assert default.kv_concurrency == 28_160 // 10
    assert default.max_num_seqs == 1024 == default.default_max_num_seqs  # H100-class default
    asked = evaluate(exact(max_num_seqs=2048), small)
    assert asked.max_num_seqs == 2048


def test_an_option_that_misses_the_slo_is_never_recommended() -> None:
    impossible = Workload(requests_per_second=1, prompt_tokens=1000, output_tokens=200, tpot_seconds=0.001)
    chosen, options = recommend(exact(), impossible, tensor_parallel_sizes=[1, 2, 4])
    assert chosen is None
    assert all(not o.feasible and o.rejection == "misses SLO" for o in options)


def test_the_tpot_slo_caps_the_batch() -> None:
    workload = Workload(concurrent_users=100, prompt_tokens=1000, output_tokens=200, tpot_seconds=0.012)
    option = evaluate(exact(), workload)
    assert option.feasible and option.slo_batch is not None
    assert option.max_num_seqs == option.slo_batch < option.kv_concurrency
    assert option.tpot_seconds is not None and option.tpot_seconds <= 0.012


def test_smallest_tp_that_fits_is_recommended() -> None:
    big = ModelSpec(
        num_hidden_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=128_256,
        num_parameters=70_553_706_496,
        max_model_len=131_072,
        intermediate_size=28_672,
    )
    chosen, options = recommend(
        PlanRequest(model=big, gpu=H100), Workload(concurrent_users=8, prompt_tokens=1000, output_tokens=200)
    )
    assert (
        options[0].tensor_parallel_size == 1 and options[0].rejection == "does not fit"
    )  # 131 GiB of weights
    assert chosen is not None and chosen.tensor_parallel_size == 2


def test_a_larger_tp_wins_only_with_fewer_gpus_in_all() -> None:
    big = ModelSpec(
        num_hidden_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=128_256,
        num_parameters=70_553_706_496,
        max_model_len=131_072,
        intermediate_size=28_672,
    )
    chosen, options = recommend(
        PlanRequest(model=big, gpu=H100),
        Workload(concurrent_users=200, prompt_tokens=2000, output_tokens=500),
    )
    by_tp = {o.tensor_parallel_size: o for o in options if o.feasible}
    assert chosen is not None
    assert chosen.gpus == min(o.gpus for o in by_tp.values())
    assert chosen.gpus < by_tp[2].gpus
    assert any("fewer than" in reason for reason in chosen.reasons)


def test_sweep_ranks_feasible_options_by_cost_and_explains_rejections() -> None:
    cheap = GpuSpec(
        name="cheap-24g",
        memory_bytes=24 * GIB,
        memory_bandwidth_bytes_per_second=10**12,
        bf16_dense_flops_per_second=10**14,
        price_per_hour_usd=0.5,
    )
    dear = GpuSpec(
        name="dear-80g",
        memory_bytes=80 * GIB,
        memory_bandwidth_bytes_per_second=3 * 10**12,
        bf16_dense_flops_per_second=10**15,
        price_per_hour_usd=4.0,
    )
    tiny = GpuSpec(
        name="tiny-8g",
        memory_bytes=8 * GIB,
        memory_bandwidth_bytes_per_second=10**12,
        bf16_dense_flops_per_second=10**14,
        price_per_hour_usd=0.1,
    )
    options = sweep(
        PlanRequest(model=LLAMA_8B),
        Workload(concurrent_users=20, prompt_tokens=1000, output_tokens=200),
        [dear, tiny, cheap],
        tensor_parallel_sizes=[1],
        quantizations=[None],
    )
    feasible = [o for o in options if o.feasible]
    assert next(o.gpu for o in feasible) == "cheap-24g"
    assert options == rank(options)
    rejected = [o for o in options if o.gpu == "tiny-8g" and o.quantization is None]
    assert rejected and all(not o.feasible and "weights need" in o.reasons[0] for o in rejected)


def test_a_sweep_option_is_the_same_as_evaluating_that_option_alone() -> None:
    """The sweep's shortcut (one clone per option, the context length chosen once) changes nothing."""
    workload = Workload(requests_per_second=5, prompt_tokens=1000, output_tokens=200, tpot_seconds=0.05)
    options = sweep(PlanRequest(model=LLAMA_8B), workload, [H100], tensor_parallel_sizes=[1, 2])
    evaluated = [o for o in options if o.plan is not None]
    assert len(evaluated) >= 4
    for option in evaluated:
        alone = evaluate(
            PlanRequest(
                model=LLAMA_8B,
                gpu=H100,
                tensor_parallel_size=option.tensor_parallel_size,
                kv_cache_dtype=option.kv_cache_dtype,
                quantization=option.quantization or "none",
            ),
            workload,
        )
        assert alone == option


def test_with_changes_equals_dataclasses_replace() -> None:
    request = exact(max_num_seqs=64, prompt_tokens=10)
    changed = with_changes(request, tensor_parallel_size=2, kv_cache_dtype="fp8", detail=False)
    assert changed == dataclasses.replace(request, tensor_parallel_size=2, kv_cache_dtype="fp8", detail=False)
    assert with_changes(request) == request and with_changes(request) is not request
    with pytest.raises(TypeError, match="no field"):
        with_changes(request, tensor_parallel=2)
