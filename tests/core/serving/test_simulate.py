"""The whole simulator: closed-form stretches against step-by-step runs, the client gate, limits, results."""

from __future__ import annotations

import math

import pytest

from service.core.errors import InvalidSpec
from service.core.planner import PlanRequest, plan
from service.core.serving import (
    RESULT_KEYS,
    BenchmarkSpec,
    SimulationLimits,
    StepCoefficients,
    simulate,
)
from service.core.serving.simulate import prepare_replica
from service.core.serving.step_time import StepLoad, StepTimeModel
from tests.core.model_cards import LLAMA_31_8B
from tests.core.serving.test_step_time import H100

COEFFS = StepCoefficients(
    request_latency_seconds=0.0,  # the engine alone: TTFT = its steps
    bandwidth_efficiency=0.8,
    compute_efficiency=0.5,
    gemm_half_tokens=100.0,
    attention_efficiency=0.4,
    step_overhead_seconds=0.002,
    per_request_seconds=10e-6,
)


def _request(**changes: object) -> PlanRequest:
    settings: dict[str, object] = {"max_model_len": 8192, **changes}
    return PlanRequest(model=LLAMA_31_8B, gpu=H100, **settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "spec",
    [
        BenchmarkSpec(num_prompts=40, random_input_len=300, random_output_len=60, random_range_ratio=0.5),
        BenchmarkSpec(num_prompts=40, random_input_len=300, random_output_len=60, request_rate=8.0, seed=2),
        BenchmarkSpec(num_prompts=30, random_input_len=500, random_output_len=80, max_concurrency=4),
        BenchmarkSpec(
            num_prompts=30,
            random_input_len=200,
            random_output_len=50,
            random_prefix_len=100,
            request_rate=20.0,
        ),
    ],
)
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_closed_form_decode_stretches_match_a_step_by_step_run(
    spec: BenchmarkSpec, async_scheduling: bool
) -> None:
    request = _request(async_scheduling=async_scheduling)
    fast = simulate(request, spec, coefficients=COEFFS)
    slow = simulate(request, spec, coefficients=COEFFS, step_by_step=True)
    assert fast.num_steps == slow.num_steps
    for key in ("duration", "mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "p99_ttft_ms", "mean_itl_ms"):
        assert math.isclose(getattr(fast.result, key), getattr(slow.result, key), rel_tol=1e-9), key
    # Medians/p99 of the ITL come from a few samples per stretch: within 1 % of the exact list.
    assert math.isclose(fast.result.median_itl_ms, slow.result.median_itl_ms, rel_tol=0.01)
    assert math.isclose(fast.result.p99_itl_ms, slow.result.p99_itl_ms, rel_tol=0.01)


def test_closed_form_matches_step_by_step_through_preemptions() -> None:
    # A tiny KV pool (400 blocks of 16 = 6,400 tokens) for 40 requests of 300 + 200 tokens forces preemption.
    request = _request(num_gpu_blocks_override=401, async_scheduling=False, max_model_len=2048, block_size=16)
    spec = BenchmarkSpec(num_prompts=40, random_input_len=300, random_output_len=200)
    fast = simulate(request, spec, coefficients=COEFFS)
    slow = simulate(request, spec, coefficients=COEFFS, step_by_step=True)
    assert fast.num_preemptions > 0 and fast.num_preemptions == slow.num_preemptions
    assert math.isclose(fast.result.duration, slow.result.duration, rel_tol=1e-9)
    assert math.isclose(fast.result.mean_ttft_ms, slow.result.mean_ttft_ms, rel_tol=1e-9)


def test_one_request_is_one_prefill_step_then_output_minus_one_decode_steps() -> None:
    request = _request(async_scheduling=False)
    p = plan(request)
    spec = BenchmarkSpec(dataset_name="explicit", num_prompts=1, requests=((100, 10),))
    sim = simulate(request, spec, plan=p, coefficients=COEFFS)
    model = StepTimeModel.build(model=LLAMA_31_8B, gpu=H100, plan=p, coefficients=COEFFS)
    prefill = model.step_seconds(
        StepLoad(
            num_tokens=100,
            num_requests=1,
            decode_context_tokens=0,
            prefill_attention_pairs=100 * 50,
            prefill_kv_tokens=100,
        )
    )
    # Decode step j reads the KV of 100 + j tokens (context before the new token).
    decodes = [
        model.step_seconds(
            StepLoad(
                num_tokens=1,
                num_requests=1,
                decode_context_tokens=100 + j,
                prefill_attention_pairs=0.0,
                prefill_kv_tokens=0,
            )
        )
        for j in range(9)
    ]
    assert sim.num_steps == 10
    assert math.isclose(sim.result.mean_ttft_ms, prefill * 1e3, rel_tol=1e-9)
    assert math.isclose(sim.result.mean_tpot_ms, sum(decodes) / 9 * 1e3, rel_tol=1e-9)
    assert math.isclose(sim.result.duration, prefill + sum(decodes), rel_tol=1e-9)
    assert sim.result.total_output_tokens == 10 and sim.result.completed == 1


def test_max_concurrency_one_serialises_the_requests() -> None:
    request = _request(async_scheduling=False)
    spec = BenchmarkSpec(dataset_name="explicit", num_prompts=3, requests=((100, 10),), max_concurrency=1)
    one = simulate(
        request,
        BenchmarkSpec(dataset_name="explicit", num_prompts=1, requests=((100, 10),)),
        coefficients=COEFFS,
    )
    three = simulate(request, spec, coefficients=COEFFS)
    # Each request waits for the previous one's last token; the engine sees one request at a time.
    assert math.isclose(three.result.duration, 3 * one.result.duration, rel_tol=1e-9)
    assert math.isclose(three.result.mean_ttft_ms, one.result.mean_ttft_ms, rel_tol=1e-9)
    assert three.result.max_concurrent_requests == 1


def test_more_concurrency_means_more_throughput_and_slower_tokens() -> None:
    request = _request()
    results = [
        simulate(
            request,
            BenchmarkSpec(num_prompts=64, random_input_len=512, random_output_len=64, max_concurrency=c),
            coefficients=COEFFS,
        ).result
        for c in (1, 8, 64)
    ]
    assert results[0].output_throughput < results[1].output_throughput < results[2].output_throughput
    assert results[0].mean_tpot_ms < results[1].mean_tpot_ms < results[2].mean_tpot_ms


def test_without_gpu_p2p_tensor_parallel_tokens_are_slower_and_the_assumption_is_stated() -> None:
    request = _request(tensor_parallel_size=2)
    spec = BenchmarkSpec(num_prompts=32, random_input_len=512, random_output_len=64)
    p2p = simulate(request, spec, coefficients=COEFFS)
    shm = simulate(request, spec, coefficients=COEFFS, gpu_peer_to_peer=False)
    assert shm.result.mean_tpot_ms > p2p.result.mean_tpot_ms
    assert shm.result.mean_ttft_ms > p2p.result.mean_ttft_ms
    assert shm.result.output_throughput < p2p.result.output_throughput
    assert any("no GPU P2P" in line for line in shm.assumptions)
    assert not any("no GPU P2P" in line for line in p2p.assumptions)
    # A prepared replica carries the P2P state: the same run through it gives the same figures.
    replica = prepare_replica(request, coefficients=COEFFS, gpu_peer_to_peer=False)
    again = simulate(request, spec, replica=replica)
    assert again.result == shm.result and again.assumptions == shm.assumptions


def test_a_shared_prefix_is_computed_once() -> None:
    request = _request()
    spec = BenchmarkSpec(num_prompts=20, random_input_len=100, random_output_len=10, random_prefix_len=512)
    sim = simulate(request, spec, coefficients=COEFFS)
    assert sim.prefix_cache_hit_tokens == 19 * 512  # 512 = 32 whole blocks of 16, hit by every later request


def test_results_are_deterministic_for_a_seed_and_use_vllms_keys() -> None:
    request = _request()
    spec = BenchmarkSpec(num_prompts=50, random_range_ratio=0.3, request_rate=5.0, dataset_name="sharegpt")
    first = simulate(request, spec, coefficients=COEFFS)
    second = simulate(request, spec, coefficients=COEFFS)
    assert first.result == second.result
    assert tuple(first.result.as_dict()) == RESULT_KEYS
    assert 0 < len(first.timeline) <= 200
    times = [p.time_seconds for p in first.timeline]
    assert times == sorted(times)
    assert all(0.0 <= p.kv_cache_usage_ratio <= 1.0 for p in first.timeline)


def test_requests_longer_than_max_model_len_fail_like_vllms_http_400() -> None:
    request = _request(max_model_len=1024)
    spec = BenchmarkSpec(dataset_name="explicit", num_prompts=2, requests=((1000, 100), (100, 10)))
    sim = simulate(request, spec, coefficients=COEFFS)
    assert sim.result.completed == 1 and sim.result.failed == 1
    assert any("max_model_len" in m for m in sim.messages)


def test_limits_refuse_with_the_field_named() -> None:
    request = _request()
    with pytest.raises(InvalidSpec) as error:
        simulate(request, BenchmarkSpec(num_prompts=500), limits=SimulationLimits(max_num_prompts=100))
    assert error.value.field == "benchmark.num_prompts"
    with pytest.raises(InvalidSpec) as error:
        simulate(request, BenchmarkSpec(num_prompts=50), limits=SimulationLimits(max_total_tokens=1000))
    assert error.value.field == "benchmark.num_prompts"
    with pytest.raises(InvalidSpec) as error:
        simulate(
            request,
            BenchmarkSpec(num_prompts=20, random_output_len=100, max_concurrency=1),
            limits=SimulationLimits(max_simulated_steps=10),
        )
    assert error.value.field == "benchmark.num_prompts"


def test_a_plan_that_does_not_fit_is_refused() -> None:
    with pytest.raises(InvalidSpec) as error:
        simulate(_request(max_model_len=131_072, gpu_memory_utilization=0.2), BenchmarkSpec(num_prompts=1))
    assert error.value.field == "model"


def test_closed_form_matches_step_by_step_under_v0_scheduling() -> None:
    request = _request(engine="vllm-0.10-v0", max_model_len=2048)
    spec = BenchmarkSpec(num_prompts=60, random_input_len=300, random_output_len=80, request_rate=15.0)
    fast = simulate(request, spec, coefficients=COEFFS)
    slow = simulate(request, spec, coefficients=COEFFS, step_by_step=True)
    assert fast.num_steps == slow.num_steps
    assert math.isclose(fast.result.duration, slow.result.duration, rel_tol=1e-9)
    assert math.isclose(fast.result.mean_tpot_ms, slow.result.mean_tpot_ms, rel_tol=1e-9)
    assert any("V0" in line for line in fast.assumptions)


def test_steps_with_output_leave_out_steps_of_partial_prefill_chunks() -> None:
    # One prompt of 20,000 tokens with the default 8,192-token budget: chunks of 8,192, 8,192 and 3,616 — the
    # first two sample nothing — then 4 decode steps: 7 steps, 5 of them with output; one request running.
    request = _request(max_model_len=32_768, async_scheduling=False)
    spec = BenchmarkSpec(dataset_name="explicit", num_prompts=1, requests=((20_000, 5),))
    sim = simulate(request, spec, coefficients=COEFFS)
    assert sim.plan.settings.max_num_batched_tokens == 8192
    assert (sim.num_steps, sim.num_steps_with_output, sim.peak_running) == (7, 5, 1)


def test_async_scheduling_runs_one_more_step_for_a_finished_request() -> None:
    # With async scheduling step n+1 is scheduled before step n's output is seen, so a request that got its
    # last token is scheduled once more (its token discarded): 8 steps instead of 7, still 5 with output,
    # and the client's timings are those of the 7 steps.
    spec = BenchmarkSpec(dataset_name="explicit", num_prompts=1, requests=((20_000, 5),))
    lagged = simulate(_request(max_model_len=32_768, async_scheduling=True), spec, coefficients=COEFFS)
    assert (lagged.num_steps, lagged.num_steps_with_output) == (8, 5)


def test_a_gpu_without_bandwidth_or_flops_figures_is_refused_naming_the_gpu() -> None:
    from dataclasses import replace

    for gpu in (
        replace(H100, memory_bandwidth_bytes_per_second=None),
        replace(H100, bf16_dense_flops_per_second=None),
    ):
        with pytest.raises(InvalidSpec) as error:
            simulate(
                PlanRequest(model=LLAMA_31_8B, gpu=gpu, max_model_len=8192), BenchmarkSpec(num_prompts=2)
            )
        assert error.value.field == "gpu"
    with pytest.raises(InvalidSpec) as error:
        simulate(
            PlanRequest(model=LLAMA_31_8B, gpu=None, kv_cache_memory_bytes=2**30, max_model_len=2048),
            BenchmarkSpec(num_prompts=2),
        )
    assert error.value.field == "gpu"


def test_sliding_window_layers_read_at_most_their_window_in_decode() -> None:
    from service.catalog.builtin import builtin_snapshot

    entry = builtin_snapshot().find_model("gpt-oss-20b")
    assert entry is not None
    model = entry.spec
    p = plan(PlanRequest(model=model, gpu=H100, max_model_len=8192, async_scheduling=False))
    step = StepTimeModel.build(model=model, gpu=H100, plan=p, coefficients=COEFFS)
    # gpt-oss-20b alternates 12 sliding (window 128) and 12 full layers: half the KV bytes are windowed.
    assert step.attention_window_tokens == 128
    assert step.windowed_kv_bytes_per_token * 2 == step.kv_bytes_per_token
    base = StepLoad(
        num_tokens=4,
        num_requests=4,
        decode_context_tokens=0,
        prefill_attention_pairs=0.0,
        prefill_kv_tokens=0,
    )
    load = StepLoad(
        num_tokens=4,
        num_requests=4,
        decode_context_tokens=4 * 1000,
        prefill_attention_pairs=0.0,
        prefill_kv_tokens=0,
        decode_windowed_tokens=4 * 128,
    )
    bandwidth = H100.memory_bandwidth_bytes_per_second * COEFFS.bandwidth_efficiency  # type: ignore[operator]
    half = step.windowed_kv_bytes_per_token
    expected_kv = (4 * 1000 * half + 4 * 128 * half) / bandwidth
    assert math.isclose(step.step_seconds(load) - step.step_seconds(base), expected_kv, rel_tol=1e-9)


@pytest.mark.parametrize("model_name", ["gpt-oss-20b", "mistral-7b-v0.1"])
def test_closed_form_stretches_match_step_by_step_across_the_window_boundary(model_name: str) -> None:
    from service.catalog.builtin import builtin_snapshot

    entry = builtin_snapshot().find_model(model_name)
    assert entry is not None
    request = PlanRequest(model=entry.spec, gpu=H100, max_model_len=8192)
    # Prompts of 50–150 tokens with 300 outputs: contexts cross gpt-oss's 128-token window mid-stretch.
    spec = BenchmarkSpec(
        num_prompts=30, random_input_len=100, random_output_len=300, random_range_ratio=0.5, request_rate=10.0
    )
    fast = simulate(request, spec, coefficients=COEFFS)
    slow = simulate(request, spec, coefficients=COEFFS, step_by_step=True)
    assert fast.num_steps == slow.num_steps
    for key in ("duration", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms"):
        assert math.isclose(getattr(fast.result, key), getattr(slow.result, key), rel_tol=1e-9), key


@pytest.mark.parametrize(
    ("engine", "ready_check", "warmups", "primed"),
    [
        ("vllm-0.12", None, 0, True),  # benchmark_serving.py / vllm bench serve before 0.14 always probe
        ("vllm-0.12", 0, 0, False),  # --ready-check-timeout-sec 0 skips the probe
        ("vllm-0.16", None, 0, False),  # default 0 from 0.14 (vLLM PR #30975)
        ("vllm-0.16", 600, 0, True),
        ("vllm-0.16", None, 2, True),  # --num-warmups sends the first prompt too
    ],
)
def test_the_clients_readiness_probe_leaves_the_first_prompt_in_the_prefix_cache(
    engine: str, ready_check: int | None, warmups: int, primed: bool
) -> None:
    request = _request(async_scheduling=False, engine=engine)
    p = plan(request)
    spec = BenchmarkSpec(
        dataset_name="explicit",
        num_prompts=2,
        requests=((100, 10), (100, 10)),
        ready_check_timeout_sec=ready_check,
        num_warmups=warmups,
    )
    sim = simulate(request, spec, plan=p, coefficients=COEFFS)
    bs = p.kv_cache.block_size
    hit = (100 - 1) // bs * bs  # whole blocks, never the last prompt token (get_computed_blocks)
    # Only the first request's prompt was sent before the run; the second one is new to the cache.
    assert sim.prefix_cache_hit_tokens == (hit if primed else 0)
    model = StepTimeModel.build(model=LLAMA_31_8B, gpu=H100, plan=p, coefficients=COEFFS)
    computed = 100 - hit if primed else 100
    first_step = model.step_seconds(
        StepLoad(
            num_tokens=computed + 100,
            num_requests=2,
            decode_context_tokens=0,
            prefill_attention_pairs=computed * ((100 - computed) + computed / 2) + 100 * 50,
            prefill_kv_tokens=200,
        )
    )
    # Both prompts fit the first step's budget: both first tokens come at its end.
    assert math.isclose(sim.result.mean_ttft_ms, first_step * 1e3, rel_tol=1e-9)


def test_a_primed_single_request_pays_only_for_its_last_partial_block() -> None:
    request = _request(async_scheduling=False, engine="vllm-0.12")
    p = plan(request)
    spec = BenchmarkSpec(dataset_name="explicit", num_prompts=1, requests=((1024, 10),))
    primed = simulate(request, spec, plan=p, coefficients=COEFFS)
    cold = simulate(
        request,
        BenchmarkSpec(
            dataset_name="explicit", num_prompts=1, requests=((1024, 10),), ready_check_timeout_sec=0
        ),
        plan=p,
        coefficients=COEFFS,
    )
    assert primed.prefix_cache_hit_tokens == 1024 - p.kv_cache.block_size  # 1,023 // 16 whole blocks
    model = StepTimeModel.build(model=LLAMA_31_8B, gpu=H100, plan=p, coefficients=COEFFS)
    bs = p.kv_cache.block_size
    last = model.step_seconds(
        StepLoad(
            num_tokens=bs,
            num_requests=1,
            decode_context_tokens=0,
            prefill_attention_pairs=bs * (1024 - bs + bs / 2),
            prefill_kv_tokens=1024,
        )
    )
    assert math.isclose(primed.result.mean_ttft_ms, last * 1e3, rel_tol=1e-9)
    assert primed.result.mean_ttft_ms < cold.result.mean_ttft_ms
    # The decode steps after it are the same work.
    assert math.isclose(primed.result.mean_tpot_ms, cold.result.mean_tpot_ms, rel_tol=1e-9)


def test_rate_searches_never_assume_a_primed_cache() -> None:
    from service.core.serving import search as search_module

    request = _request(engine="vllm-0.12")
    seen: list[BenchmarkSpec] = []
    real = search_module.run_benchmark

    def spy(spec: BenchmarkSpec, **kwargs: object):  # type: ignore[no-untyped-def]
        seen.append(spec)
        return real(spec, **kwargs)  # type: ignore[arg-type]

    search_module.run_benchmark = spy  # type: ignore[assignment]
    try:
        search_module.max_rate_within_slo(
            request,
            search_module.SloTarget(tpot_seconds=0.05),
            prompt_tokens=200,
            output_tokens=20,
            num_prompts=50,
        )
    finally:
        search_module.run_benchmark = real  # type: ignore[assignment]
    assert seen and all(spec.ready_check_timeout_sec == 0 and spec.num_warmups == 0 for spec in seen)


def test_the_request_latency_adds_to_ttft_and_e2el_but_not_to_inter_token_gaps() -> None:
    from dataclasses import replace as dc_replace

    request = _request(async_scheduling=False)
    p = plan(request)
    spec = BenchmarkSpec(dataset_name="explicit", num_prompts=1, requests=((100, 10),))
    base = simulate(request, spec, plan=p, coefficients=COEFFS).result
    late = simulate(
        request, spec, plan=p, coefficients=dc_replace(COEFFS, request_latency_seconds=0.01)
    ).result
    assert math.isclose(late.mean_ttft_ms, base.mean_ttft_ms + 10.0, rel_tol=1e-9)
    assert math.isclose(late.mean_e2el_ms, base.mean_e2el_ms + 10.0, rel_tol=1e-9)
    assert math.isclose(late.mean_tpot_ms, base.mean_tpot_ms, rel_tol=1e-9)
    # Behind --max-concurrency 1 the next request reaches the engine that much after the slot frees.
    two = BenchmarkSpec(
        dataset_name="explicit", num_prompts=2, requests=((100, 10), (100, 10)), max_concurrency=1
    )
    serial = simulate(request, two, plan=p, coefficients=COEFFS).result
    serial_late = simulate(
        request, two, plan=p, coefficients=dc_replace(COEFFS, request_latency_seconds=0.01)
    ).result
    assert math.isclose(serial_late.duration, serial.duration + 0.02, rel_tol=1e-9)


@pytest.mark.parametrize(
    "spec",
    [
        BenchmarkSpec(num_prompts=40, random_input_len=300, random_output_len=60, request_rate=8.0, seed=2),
        BenchmarkSpec(num_prompts=30, random_input_len=500, random_output_len=80, max_concurrency=4),
    ],
)
def test_closed_form_stretches_match_step_by_step_with_a_request_latency(spec: BenchmarkSpec) -> None:
    from dataclasses import replace as dc_replace

    request = _request()
    coefficients = dc_replace(COEFFS, request_latency_seconds=0.004)
    fast = simulate(request, spec, coefficients=coefficients)
    slow = simulate(request, spec, coefficients=coefficients, step_by_step=True)
    assert fast.num_steps == slow.num_steps
    for key in ("duration", "mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "p99_ttft_ms", "mean_itl_ms"):
        assert math.isclose(getattr(fast.result, key), getattr(slow.result, key), rel_tol=1e-9), key
    without = simulate(request, spec, coefficients=COEFFS)
    assert fast.result.mean_ttft_ms > without.result.mean_ttft_ms


@pytest.mark.parametrize(
    "spec",
    [
        BenchmarkSpec(num_prompts=40, random_input_len=300, random_output_len=60, request_rate=8.0, seed=2),
        BenchmarkSpec(
            dataset_name="explicit", num_prompts=4, requests=((1000, 100), (100, 10), (900, 200), (50, 1))
        ),
    ],
)
def test_a_runs_figures_read_from_its_requests_are_those_of_its_outcomes(spec: BenchmarkSpec) -> None:
    """``summarize`` and ``EngineRun.latency_summary`` read the engine's requests directly; the figures are
    ``calculate_metrics`` and ``latency_summary`` of the run's outcomes, failed requests included."""
    from service.core.serving.metrics import calculate_metrics, latency_summary
    from service.core.serving.simulate import run_benchmark, summarize

    replica = prepare_replica(_request(max_model_len=1024), coefficients=COEFFS)
    run = run_benchmark(spec, replica=replica)
    outcomes = run.outcomes()
    trace = run.trace
    expected = calculate_metrics(
        outcomes,
        duration_seconds=run.duration_seconds,
        itl_samples=trace.itl_samples,
        itl_count=trace.itl_count,
        itl_sum_seconds=trace.itl_sum_seconds,
        token_times=trace.output_events,
    )
    assert summarize(run).result == expected
    assert run.latency_summary() == latency_summary(outcomes)
    if spec.dataset_name == "explicit":
        assert expected.failed == 2 and expected.completed == 2


def test_replicas_that_simulate_alike_share_one_rate_search() -> None:
    """Two replicas planned differently — profiled, and with the profiled block count given as an override —
    have the same simulation inputs: ``for_replica`` gives the other's summary exactly, and a search shared
    through ``SharedSearches`` runs no simulation for the second and returns what its own search returns."""
    from dataclasses import replace

    from service.core.serving import search as search_module
    from service.core.serving.simulate import for_replica, run_benchmark, summarize

    first = _request()
    second = replace(first, num_gpu_blocks_override=plan(first).kv_cache.num_gpu_blocks)
    replica, other = prepare_replica(first, coefficients=COEFFS), prepare_replica(second, coefficients=COEFFS)
    assert replica.simulation_inputs == other.simulation_inputs and replica.plan != other.plan
    spec = BenchmarkSpec(num_prompts=40, random_input_len=300, random_output_len=60, request_rate=8.0)
    alike = for_replica(summarize(run_benchmark(spec, replica=replica)), other, spec)
    assert alike == summarize(run_benchmark(spec, replica=other))
    assert alike.plan == other.plan

    runs = 0
    real = search_module.run_benchmark

    def counted(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        nonlocal runs
        runs += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    slo = search_module.SloTarget(tpot_seconds=0.05)
    shared = search_module.SharedSearches()
    search_module.run_benchmark = counted  # type: ignore[assignment]
    try:
        kept = search_module.max_rate_within_slo(
            first,
            slo,
            prompt_tokens=300,
            output_tokens=60,
            num_prompts=40,
            coefficients=COEFFS,
            shared=shared,
        )
        ran = runs
        found = search_module.max_rate_within_slo(
            second,
            slo,
            prompt_tokens=300,
            output_tokens=60,
            num_prompts=40,
            coefficients=COEFFS,
            shared=shared,
        )
        assert runs == ran and len(shared) == 1
    finally:
        search_module.run_benchmark = real  # type: ignore[assignment]
    assert found.at_rate is not None and found.at_rate.plan == other.plan
    assert found == search_module.max_rate_within_slo(
        second, slo, prompt_tokens=300, output_tokens=60, num_prompts=40, coefficients=COEFFS
    )
    assert kept == search_module.max_rate_within_slo(
        first, slo, prompt_tokens=300, output_tokens=60, num_prompts=40, coefficients=COEFFS
    )
