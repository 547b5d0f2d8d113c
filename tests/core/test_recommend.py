"""Recommendations: KV limits by hand, the roofline bound by its formula, and the simulator's sizing by its
documented rules (replicas from min(simulated, roofline), monotone in demand, SLO met at the asked percentile,
max_num_seqs within 98 % of the best rate, infeasible SLOs rejected with a reason, searches cached)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from service.core.planner import PlanRequest, with_changes
from service.core.planner import plan as planner_plan
from service.core.recommend import (
    MAX_NUM_SEQS_KEEP_RATIO,
    SEARCH_NUM_PROMPTS,
    SWEEP_MAX_SIMULATED,
    SWEEP_SEARCH,
    Search,
    Workload,
    _rate_search,
    evaluate,
    rank,
    recommend,
    sweep,
)
from service.core.serving import SloTarget, max_rate_within_slo
from service.core.specs import GpuSpec, ModelSpec
from service.core.throughput import STEP_OVERHEAD_SECONDS, decode_step, prefill_seconds
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


def test_replicas_for_concurrent_users_come_from_the_users_one_replica_holds_with_headroom() -> None:
    # The KV cache alone: 55 GiB / 2 MiB per block = 28,160 blocks; a 1,000 + 200 token request needs
    # cdiv(1,200, 16) = 75 blocks → 375 requests per replica.
    workload = Workload(concurrent_users=1000, prompt_tokens=1000, output_tokens=200, headroom_ratio=0.2)
    option = evaluate(exact(), workload)
    assert option.feasible and option.sizing == "simulated"
    assert option.kv_concurrency == 28_160 // 75 == 375
    # A replica holds at most max_num_seqs requests in flight, so at least ceil(users × 1.2 / max_num_seqs)
    # replicas are needed; the simulated in-flight count (rate × mean E2E latency) can only need more.
    assert option.replicas >= math.ceil(1000 * 1.2 / option.max_num_seqs)
    assert option.gpus == option.replicas
    assert option.cost_per_hour_usd == pytest.approx(4.0 * option.replicas)
    more = evaluate(exact(), dataclasses.replace(workload, concurrent_users=4000))
    assert more.replicas >= option.replicas


def roofline_rps(request: PlanRequest, workload: Workload, batch: int) -> float:
    """The roofline of service.core.throughput by hand: batch / (prefill(p95 prompt) + output × step(batch))."""
    plan = planner_plan(with_changes(request, max_model_len=2048))
    step = decode_step(
        LLAMA_8B,
        H100,
        weights_bytes=plan.memory.weights_bytes,
        kv_bytes_per_token=plan.kv_cache.bytes_per_token,
        batch=batch,
        context_tokens=workload.mean_decode_context,
    ).seconds
    ttft = prefill_seconds(
        LLAMA_8B, H100, prompt_tokens=workload.prompt_tokens, weights_bytes=plan.memory.weights_bytes
    )
    return batch / (ttft.seconds + workload.output_tokens * step)


def test_replicas_for_a_request_rate_divide_it_by_the_smaller_of_simulated_and_roofline_capacity() -> None:
    workload = Workload(requests_per_second=300, prompt_tokens=1000, output_tokens=200, headroom_ratio=0.25)
    option = evaluate(exact(), workload)
    assert option.feasible and option.requests_per_second_per_replica
    simulated = option.simulated_requests_per_second_per_replica
    roofline = option.roofline_requests_per_second_per_replica
    assert simulated and roofline
    # no SLO: the roofline batch is the KV limit (375 < vLLM's 1,024), the same formula as before
    assert roofline == pytest.approx(roofline_rps(exact(), workload, 375), rel=1e-6)
    assert option.requests_per_second_per_replica == pytest.approx(min(simulated, roofline))
    assert option.replicas == math.ceil(300 * 1.25 / option.requests_per_second_per_replica - 1e-9)
    assert any("roofline" in a for a in option.assumptions) and any(
        "simulator" in a for a in option.assumptions
    )


def test_replicas_never_fall_as_the_request_rate_rises() -> None:
    replicas = [
        evaluate(exact(), Workload(requests_per_second=rate, prompt_tokens=1000, output_tokens=200)).replicas
        for rate in (1, 10, 40, 160)
    ]
    assert replicas == sorted(replicas)
    assert replicas[-1] > replicas[0]


def test_max_num_seqs_never_exceeds_vllms_default_unless_asked() -> None:
    small = Workload(
        concurrent_users=10, prompt_tokens=100, output_tokens=50
    )  # 28,160 / cdiv(150, 16) = 2,816
    default = evaluate(exact(), small)
    assert default.kv_concurrency == 28_160 // 10
    assert default.default_max_num_seqs == 1024  # H100-class default
    assert 1 <= default.max_num_seqs <= 1024
    asked = evaluate(exact(max_num_seqs=2048), small)
    assert asked.default_max_num_seqs == 2048
    assert 1 <= asked.max_num_seqs <= 2048


def test_the_chosen_max_num_seqs_sustains_at_least_98_percent_of_the_best_rate() -> None:
    workload = Workload(
        requests_per_second=50, prompt_tokens=1000, output_tokens=200, ttft_p95_seconds=2.0, tpot_seconds=0.05
    )
    option = evaluate(exact(), workload)
    assert option.feasible and option.simulated_requests_per_second_per_replica
    slo = SloTarget(ttft_seconds=2.0, tpot_seconds=0.05, percentile="p99")
    request = with_changes(exact(), max_model_len=2048, suggest=False, detail=False)
    best = max_rate_within_slo(
        with_changes(request, max_num_seqs=1024),
        slo,
        prompt_tokens=1000,
        output_tokens=200,
        num_prompts=SEARCH_NUM_PROMPTS,
    )
    at_choice = max_rate_within_slo(
        with_changes(request, max_num_seqs=option.max_num_seqs),
        slo,
        prompt_tokens=1000,
        output_tokens=200,
        num_prompts=SEARCH_NUM_PROMPTS,
    )
    assert at_choice.max_request_rate >= MAX_NUM_SEQS_KEEP_RATIO * best.max_request_rate
    assert option.simulated_requests_per_second_per_replica == pytest.approx(at_choice.max_request_rate)


def test_an_option_that_misses_the_slo_is_never_recommended() -> None:
    impossible = Workload(requests_per_second=1, prompt_tokens=1000, output_tokens=200, tpot_seconds=0.001)
    chosen, options = recommend(exact(), impossible, tensor_parallel_sizes=[1, 2, 4])
    assert chosen is None
    assert all(not o.feasible and o.rejection == "misses SLO" for o in options)


def test_the_tpot_slo_is_met_in_the_simulation_and_caps_the_roofline_batch() -> None:
    workload = Workload(concurrent_users=100, prompt_tokens=1000, output_tokens=200, tpot_seconds=0.012)
    option = evaluate(exact(), workload)
    assert option.feasible and option.slo_batch is not None
    assert option.slo_batch < option.kv_concurrency  # the roofline's own cap from the SLO
    assert option.tpot_seconds is not None and option.tpot_seconds <= 0.012  # simulated p99 TPOT at the rate
    looser = evaluate(exact(), dataclasses.replace(workload, tpot_seconds=0.05))
    assert looser.simulated_requests_per_second_per_replica is not None
    assert option.simulated_requests_per_second_per_replica is not None
    assert (
        looser.simulated_requests_per_second_per_replica >= option.simulated_requests_per_second_per_replica
    )


def test_an_slo_no_rate_meets_is_rejected_with_the_reason() -> None:
    # Prefill of an 8,000-token prompt alone is 2 × 8.03 G parameters × 8,000 tokens ≈ 1.3e14 FLOPs, ≈ 0.24 s
    # at 55 % of 989 TFLOP/s: no rate keeps a 50 ms TTFT, whichever model (roofline or simulator) says it first.
    option = evaluate(
        exact(), Workload(requests_per_second=1, prompt_tokens=8000, output_tokens=200, ttft_p95_seconds=0.05)
    )
    assert not option.feasible and option.rejection == "misses SLO"
    assert option.replicas == 0 and option.reasons


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
    """The sweep's shortcut (one clone per option, the context length chosen once) changes nothing: a simulated
    option equals evaluating it with the sweep's search, an unsimulated one equals its roofline evaluation."""
    workload = Workload(requests_per_second=5, prompt_tokens=1000, output_tokens=200, tpot_seconds=0.05)
    options = sweep(PlanRequest(model=LLAMA_8B), workload, [H100], tensor_parallel_sizes=[1, 2])
    evaluated = [o for o in options if o.plan is not None]
    assert len(evaluated) >= 4
    assert any(o.sizing == "simulated" for o in evaluated)
    for option in evaluated:
        search = SWEEP_SEARCH if option.sizing == "simulated" else Search(simulate=False)
        alone = evaluate(
            PlanRequest(
                model=LLAMA_8B,
                gpu=H100,
                tensor_parallel_size=option.tensor_parallel_size,
                kv_cache_dtype=option.kv_cache_dtype,
                quantization=option.quantization or "none",
            ),
            workload,
            search=search,
        )
        assert dataclasses.replace(alone, simulations=0) == dataclasses.replace(option, simulations=0)


def test_simulating_every_option_sizes_each_roofline_feasible_option_as_evaluating_it_alone() -> None:
    workload = Workload(requests_per_second=5, prompt_tokens=1000, output_tokens=200, tpot_seconds=0.05)
    bounds = sweep(PlanRequest(model=LLAMA_8B), workload, [H100], simulate=False)
    options = sweep(PlanRequest(model=LLAMA_8B), workload, [H100], simulate_every_option=True)
    feasible_by_roofline = {
        (o.tensor_parallel_size, o.kv_cache_dtype, o.quantization) for o in bounds if o.feasible
    }
    simulated = [o for o in options if o.plan is not None and o.sizing == "simulated"]
    assert len(feasible_by_roofline) > SWEEP_MAX_SIMULATED  # more than the cheapest-first sweep simulates
    assert {(o.tensor_parallel_size, o.kv_cache_dtype, o.quantization) for o in simulated} == (
        feasible_by_roofline
    )
    assert not any(o.sizing == "roofline" for o in options)
    for option in simulated:
        alone = evaluate(
            PlanRequest(
                model=LLAMA_8B,
                gpu=H100,
                tensor_parallel_size=option.tensor_parallel_size,
                kv_cache_dtype=option.kv_cache_dtype,
                quantization=option.quantization or "none",
            ),
            workload,
            search=SWEEP_SEARCH,
        )
        assert dataclasses.replace(alone, simulations=0) == dataclasses.replace(option, simulations=0)


def test_a_sweep_ranks_simulated_options_before_unsimulated_roofline_bounds() -> None:
    workload = Workload(requests_per_second=5, prompt_tokens=1000, output_tokens=200)
    options = sweep(PlanRequest(model=LLAMA_8B), workload, [H100], tensor_parallel_sizes=[1, 2, 4])
    tiers = [0 if o.sizing != "roofline" else 1 for o in options if o.feasible]
    assert tiers == sorted(tiers)
    simulated = [o for o in options if o.feasible and o.sizing == "simulated"]
    roofline = [o for o in options if o.feasible and o.sizing == "roofline"]
    assert simulated
    # what is left unsimulated is never cheaper than the best simulated option, even by its optimistic bound,
    # unless the sweep's simulation budget ran out first
    best = min(o.cost_per_hour_usd or math.inf for o in simulated)
    assert (
        all((o.cost_per_hour_usd or math.inf) >= best for o in roofline)
        or len(simulated) >= SWEEP_MAX_SIMULATED
    )


def test_asking_again_for_the_same_option_runs_no_new_simulation() -> None:
    workload = Workload(requests_per_second=7, prompt_tokens=900, output_tokens=150)
    before = _rate_search.cache_info()
    first = evaluate(exact(), workload)
    middle = _rate_search.cache_info()
    again = evaluate(exact(), workload)
    after = _rate_search.cache_info()
    assert first == again
    assert middle.misses > before.misses
    assert after.misses == middle.misses and after.hits > middle.hits


def test_with_changes_equals_dataclasses_replace() -> None:
    request = exact(max_num_seqs=64, prompt_tokens=10)
    changed = with_changes(request, tensor_parallel_size=2, kv_cache_dtype="fp8", detail=False)
    assert changed == dataclasses.replace(request, tensor_parallel_size=2, kv_cache_dtype="fp8", detail=False)
    assert with_changes(request) == request and with_changes(request) is not request
    with pytest.raises(TypeError, match="no field"):
        with_changes(request, tensor_parallel=2)
