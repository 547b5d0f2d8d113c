"""Speculative decoding in the simulator: vLLM V1's scheduling of drafts, rollback, acceptance and cost.

Golden values are derived by hand from the rules in ``service/core/serving/speculative.py`` (vLLM
``vllm/v1/core/sched/scheduler.py``, ``vllm/v1/spec_decode/metrics.py``), never from a run.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from service.catalog.builtin import builtin_snapshot
from service.core.errors import InvalidSpec
from service.core.planner import PlanRequest
from service.core.planner.features import ServingFeatures, SpeculativeConfig
from service.core.serving import BenchmarkSpec, SloTarget, StepCoefficients, max_rate_within_slo, simulate
from service.core.serving.scheduler import BlockDemand, Scheduler, SchedulerConfig, SimRequest
from service.core.serving.simulate import prepare_replica, run_benchmark
from service.core.serving.speculative import (
    mean_acceptance_length_of,
    position_acceptance_of,
    spec_decoding_of,
)
from service.core.serving.step_time import DraftCost
from tests.core.model_cards import LLAMA_31_8B
from tests.core.serving.test_step_time import H100

COEFFS = StepCoefficients(request_latency_seconds=0.0)
# An EAGLE head for Llama-3.1-8B: one decoder layer of the target's shape, with an embedding and LM head.
EAGLE_HEAD = dataclasses.replace(
    LLAMA_31_8B, num_hidden_layers=1, num_parameters=252_000_000 + 2 * 128_256 * 4_096
)


def _request(method: str | None = None, k: int = 3, **changes: object) -> PlanRequest:
    features = None
    if method is not None:
        draft = None if method in ("ngram", "ngram_gpu", "suffix") else EAGLE_HEAD
        features = ServingFeatures(
            speculative=SpeculativeConfig(method=method, num_speculative_tokens=k, draft=draft)
        )
    # Synchronous scheduling unless asked: no extra step after the last token (async scheduling's lag).
    settings: dict[str, object] = {"max_model_len": 8192, "async_scheduling": False, **changes}
    return PlanRequest(model=LLAMA_31_8B, gpu=H100, features=features, **settings)  # type: ignore[arg-type]


def _one_request(prompt: int, output: int, **changes: object) -> BenchmarkSpec:
    return BenchmarkSpec(
        dataset_name="explicit",
        num_prompts=1,
        requests=((prompt, output),),
        ready_check_timeout_sec=0,
        **changes,  # type: ignore[arg-type]
    )


# --- acceptance ------------------------------------------------------------------------------------------------


def test_mean_acceptance_length_counts_the_bonus_token_and_the_chain() -> None:
    # vLLM: mean acceptance length = 1 + accepted / drafts. A chain of 3 drafts accepted each with α = 0.8
    # (given the ones before) accepts 0.8 + 0.64 + 0.512 = 1.952 on average.
    assert math.isclose(mean_acceptance_length_of(0.8, 3), 2.952)
    assert math.isclose(position_acceptance_of(2.952, 3), 0.8, abs_tol=1e-12)
    assert position_acceptance_of(1.0, 3) == 0.0 and position_acceptance_of(4.0, 3) == 1.0


def test_default_acceptance_per_method() -> None:
    eagle3 = spec_decoding_of("eagle3", 3, None)
    assert math.isclose(eagle3.mean_acceptance_length, 1 + 0.8 + 0.64 + 0.512)
    assert math.isclose(eagle3.draft_acceptance_rate, 1.952 / 3)  # vLLM's "Avg Draft acceptance rate"
    assert eagle3.num_lookahead_tokens == 3 and not eagle3.given
    mtp = spec_decoding_of("deepseek_mtp", 1, None)
    assert math.isclose(mtp.mean_acceptance_length, 1.85) and mtp.num_lookahead_tokens == 1
    # ngram on random prompts finds no match: no drafts at all, no lookahead slots.
    ngram = spec_decoding_of("ngram", 4, None)
    assert not ngram.proposes and ngram.drafts_per_step == 0 and ngram.num_lookahead_tokens == 0
    assert spec_decoding_of("ngram", 4, 2.0).drafts_per_step == 4


def test_an_acceptance_length_beyond_one_plus_k_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidSpec) as err:
        simulate(_request("eagle3", 3), _one_request(100, 10, spec_mean_acceptance_length=4.5))
    assert err.value.field == "benchmark.spec_mean_acceptance_length"
    with pytest.raises(InvalidSpec) as err:
        BenchmarkSpec(spec_mean_acceptance_length=0.5)
    assert err.value.field == "benchmark.spec_mean_acceptance_length"


# --- one request, by hand --------------------------------------------------------------------------------------


def test_every_draft_accepted_advances_one_plus_k_tokens_per_step() -> None:
    # k = 3, mean acceptance length 4 = every draft accepted. A 100-token prompt is one prefill step that
    # samples the first token (and proposes 3 drafts); each later step schedules 1 + 3 = 4 tokens and keeps
    # all 4: 1 → 5 → 9 → 13 generated tokens, 4 steps in all.
    replica = prepare_replica(_request("eagle3", 3), coefficients=COEFFS)
    run = run_benchmark(
        _one_request(100, 13, spec_mean_acceptance_length=4.0), replica=replica, step_by_step=True
    )
    trace = run.trace
    assert trace.num_steps == 4
    assert [row[4] for row in trace.record_rows] == [100, 4, 4, 4]  # tokens scheduled per step
    assert (trace.spec_num_drafts, trace.spec_num_draft_tokens, trace.spec_num_accepted_tokens) == (3, 9, 9)
    (request,) = trace.requests
    assert request.generated == 13
    # vllm bench serve: TPOT per token over the 12 tokens after the first, ITL per streamed chunk (3 chunks of
    # 4 tokens), so the mean ITL is 4 × the TPOT.
    result = simulate(
        _request("eagle3", 3), _one_request(100, 13, spec_mean_acceptance_length=4.0), coefficients=COEFFS
    ).result
    assert math.isclose(result.mean_itl_ms, 4 * result.mean_tpot_ms, rel_tol=1e-12)
    assert result.total_output_tokens == 13


def test_rejected_drafts_are_rolled_back_and_acceptance_follows_the_accumulator() -> None:
    # Mean acceptance length 2.5 with k = 3: 1.5 accepted per draft on average. Request 0's accumulator
    # starts at 0: 1.5 → accept 1 (0.5 left), 2.0 → 2, 1.5 → 1, 2.0 → 2, 1.5 → 1. Each step keeps 1 + accepted:
    # 1 (prefill) → 3 → 6 → 8 → 11 → 13; every decode step still schedules 1 + 3 tokens.
    replica = prepare_replica(_request("eagle3", 3), coefficients=COEFFS)
    trace = run_benchmark(
        _one_request(100, 13, spec_mean_acceptance_length=2.5), replica=replica, step_by_step=True
    ).trace
    assert trace.num_steps == 6
    assert [row[4] for row in trace.record_rows] == [100, 4, 4, 4, 4, 4]
    assert (trace.spec_num_drafts, trace.spec_num_draft_tokens, trace.spec_num_accepted_tokens) == (5, 15, 7)
    result = simulate(
        _request("eagle3", 3), _one_request(100, 13, spec_mean_acceptance_length=2.5), coefficients=COEFFS
    ).result
    assert math.isclose(
        result.mean_itl_ms, 12 / 5 * result.mean_tpot_ms, rel_tol=1e-12
    )  # 5 chunks, 12 tokens


def test_a_long_run_accepts_the_given_mean_acceptance_length() -> None:
    spec = BenchmarkSpec(
        num_prompts=200, random_input_len=200, random_output_len=100, spec_mean_acceptance_length=2.2
    )
    sim = simulate(_request("eagle", 3), spec, coefficients=COEFFS)
    assert sim.spec_num_drafts > 0
    measured = 1 + sim.spec_num_accepted_tokens / sim.spec_num_drafts
    # Each request's accumulator keeps its accepted count within one token of 1.2 × its drafts; the final
    # draft of a request may be cut by max_tokens, never its count.
    assert abs(measured - 2.2) <= 200 / sim.spec_num_drafts
    assert sim.result.total_output_tokens == 200 * 100
    assert any("mean acceptance length 2.20 (given" in line for line in sim.assumptions)


@pytest.mark.parametrize(
    "spec",
    [
        BenchmarkSpec(num_prompts=60, random_input_len=300, random_output_len=90, random_range_ratio=0.5),
        BenchmarkSpec(num_prompts=60, random_input_len=300, random_output_len=90, request_rate=8.0, seed=2),
        BenchmarkSpec(num_prompts=40, random_input_len=500, random_output_len=120, max_concurrency=4),
        BenchmarkSpec(
            num_prompts=40,
            random_input_len=200,
            random_output_len=60,
            random_prefix_len=100,
            request_rate=20.0,
        ),
        BenchmarkSpec(
            num_prompts=40, random_input_len=300, random_output_len=80, spec_mean_acceptance_length=1.0
        ),
    ],
)
@pytest.mark.parametrize(
    # ngram (on the host) never runs under async scheduling in vLLM (``settings._async_scheduling``); its GPU
    # variant does.
    ("method", "async_scheduling"),
    [("eagle3", False), ("eagle", True), ("ngram", False), ("ngram_gpu", True)],
)
def test_spec_decode_stretches_match_a_step_by_step_run(
    spec: BenchmarkSpec, method: str, async_scheduling: bool
) -> None:
    request = _request(method, 3, async_scheduling=async_scheduling)
    fast = simulate(request, spec, coefficients=COEFFS)
    slow = simulate(request, spec, coefficients=COEFFS, step_by_step=True)
    assert fast.num_steps == slow.num_steps
    counters = ("spec_num_drafts", "spec_num_draft_tokens", "spec_num_accepted_tokens", "num_preemptions")
    assert [getattr(fast, c) for c in counters] == [getattr(slow, c) for c in counters]
    # Summed in the same order with the same operations: the same figures, ITL quantiles included.
    for key, value in slow.result.as_dict().items():
        assert math.isclose(getattr(fast.result, key), value, rel_tol=1e-12, abs_tol=1e-12), key


def test_spec_decode_stretches_stop_before_the_pool_runs_out() -> None:
    # 401 blocks of 16 tokens for 40 requests of 300 + 200: the pool runs dry and requests are preempted.
    request = _request("eagle3", 3, num_gpu_blocks_override=401, max_model_len=2048, block_size=16)
    spec = BenchmarkSpec(num_prompts=40, random_input_len=300, random_output_len=200)
    fast = simulate(request, spec, coefficients=COEFFS)
    slow = simulate(request, spec, coefficients=COEFFS, step_by_step=True)
    assert slow.num_preemptions > 0 and fast.num_preemptions == slow.num_preemptions
    assert fast.num_steps == slow.num_steps
    for key, value in slow.result.as_dict().items():
        assert math.isclose(getattr(fast.result, key), value, rel_tol=1e-12, abs_tol=1e-12), key


# --- the scheduler ---------------------------------------------------------------------------------------------


def _decoding(index: int, computed: int, spec_tokens: int) -> SimRequest:
    request = SimRequest(index, computed, 50, 0)
    request.computed = computed
    request.generated = 1
    request.num_tokens = computed + 1
    request.own_blocks = -(-request.num_tokens // 16)
    request.spec_tokens = spec_tokens
    return request


@pytest.mark.parametrize(("lookahead", "free_after"), [(3, 99), (0, 100)])
def test_drafts_count_against_the_budget_and_lookahead_slots_take_blocks(
    lookahead: int, free_after: int
) -> None:
    # Budget 6: the first request gets 1 + 3 tokens, the second the 2 left (its token and one draft: the rest
    # of its drafts are dropped). The first holds 2 blocks (27 tokens); 26 computed + 4 scheduled + 3
    # lookahead slots = 33 need a third block, without lookahead 30 fit in two. The second: 26 + 2 (+ 3) ≤ 32.
    config = SchedulerConfig(
        max_num_seqs=8,
        max_num_batched_tokens=6,
        demand=BlockDemand(block_size=16),
        num_free_blocks=100,
        speculative=True,
        num_lookahead_tokens=lookahead,
    )
    scheduler = Scheduler(config)
    first, second = _decoding(0, 26, 3), _decoding(1, 26, 3)
    scheduler.running.extend([first, second])
    scheduler.free_blocks = 100
    decoding, scheduled, preempted, tokens, decode_context, pairs, prefill_kv, _ = scheduler.schedule_parts()
    assert decoding == [] and preempted == 0
    assert scheduled == [(first, 4), (second, 2)]
    assert tokens == 6 and scheduler.scheduled_drafts == 4
    assert decode_context == 52 and pairs == 0.0 and prefill_kv == 0  # one KV read per request, no prefill
    assert scheduler.free_blocks == free_after
    assert first.own_blocks == (3 if lookahead else 2)


def test_no_drafts_schedule_exactly_as_without_speculative_decoding() -> None:
    # ngram with nothing proposed and no host cost: the spec path must give the non-spec run, figure by figure
    # (step by step, so the ITL quantiles are exact on both sides), preemptions included. Under async scheduling
    # the GPU n-gram proposer (vLLM runs the host one synchronously only).
    for method, changes, spec in (
        (
            "ngram",
            {},
            BenchmarkSpec(num_prompts=60, random_input_len=300, random_output_len=80, request_rate=20.0),
        ),
        (
            "ngram_gpu",
            {
                "num_gpu_blocks_override": 401,
                "max_model_len": 2048,
                "async_scheduling": True,
                "block_size": 16,
            },
            BenchmarkSpec(
                num_prompts=40, random_input_len=300, random_output_len=200, random_range_ratio=0.5
            ),
        ),
    ):
        plain = simulate(_request(None, **changes), spec, coefficients=COEFFS, step_by_step=True)
        replica = prepare_replica(_request(method, 4, **changes), coefficients=COEFFS)
        assert replica.scheduler_config.speculative and replica.scheduler_config.num_lookahead_tokens == 0
        silent = dataclasses.replace(replica, draft=DraftCost(method=method, num_passes=0))
        spec_run = simulate(_request(method, 4, **changes), spec, replica=silent)
        assert spec_run.num_steps == plain.num_steps
        assert spec_run.num_preemptions == plain.num_preemptions
        assert plain.num_preemptions > 0 or not changes  # the small pool does preempt
        assert spec_run.spec_num_drafts == 0
        for key, value in plain.result.as_dict().items():
            assert math.isclose(getattr(spec_run.result, key), value, rel_tol=1e-12, abs_tol=1e-12), key


# --- step time -------------------------------------------------------------------------------------------------


def test_the_drafters_cost_grows_with_k_one_pass_per_draft() -> None:
    costs = []
    for k in range(1, 6):
        draft = prepare_replica(_request("eagle", k), coefficients=COEFFS).draft
        assert draft is not None and draft.num_passes == k and draft.model is not None
        costs.append(draft.seconds_parts_of(64, 64, 0.0, 0)[0])
    # k passes: the first over the step's 64 tokens, the other k − 1 over one token per request (64 here too),
    # so each further draft adds the same pass.
    steps = [later - earlier for earlier, later in itertools.pairwise(costs)]
    assert all(step > 0 for step in steps)
    assert all(math.isclose(step, costs[0], rel_tol=1e-12) for step in steps)
    # A pass of the one-layer head reads its layer and the target's LM head it shares: far less than the
    # target's 32-layer step, more than nothing.
    target = prepare_replica(_request("eagle", 1), coefficients=COEFFS).step_model
    assert 0 < costs[0] < target.gpu_seconds_parts_of(64, 64, 0.0, 0)[0]


def test_a_spec_step_verifies_more_tokens_and_costs_more_than_a_plain_decode() -> None:
    plain = simulate(_request(None), _one_request(100, 13), coefficients=COEFFS)
    no_accept = simulate(
        _request("eagle3", 3), _one_request(100, 13, spec_mean_acceptance_length=1.0), coefficients=COEFFS
    )
    # Nothing accepted: the same 13 steps, each decode step heavier (4 tokens, 4 logits rows, 3 draft passes).
    assert no_accept.num_steps == plain.num_steps == 13
    assert no_accept.result.mean_tpot_ms > plain.result.mean_tpot_ms
    assert not any("speculative" in line for line in plain.assumptions)


def test_a_rate_search_reads_the_workloads_acceptance() -> None:
    # A TPOT target of 8 ms: met at a higher rate when more drafts are accepted, since each step then delivers
    # more tokens for nearly the same time.
    slo = SloTarget(tpot_seconds=0.008, percentile="mean")
    request = _request("eagle3", 3)
    low, high = (
        max_rate_within_slo(
            request,
            slo,
            prompt_tokens=500,
            output_tokens=100,
            num_prompts=100,
            coefficients=COEFFS,
            spec_mean_acceptance_length=length,
        )
        for length in (1.5, 3.5)
    )
    assert high.max_request_rate > low.max_request_rate > 0
    assert high.at_rate is not None and high.at_rate.speculative is not None
    assert high.at_rate.speculative.mean_acceptance_length == 3.5


@pytest.mark.parametrize("k", [1, 2])
def test_mtp_passes_run_one_target_layer_each_and_read_the_shared_lm_head(k: int) -> None:
    catalog = builtin_snapshot()
    model, gpu = catalog.find_model("deepseek-v3"), catalog.find_gpu("h200")
    assert model is not None and gpu is not None
    ds = model.spec
    features = ServingFeatures(speculative=SpeculativeConfig(method="deepseek_mtp", num_speculative_tokens=k))
    request = PlanRequest(
        model=ds, gpu=gpu.spec, tensor_parallel_size=8, max_model_len=8192, features=features
    )
    replica = prepare_replica(request)
    draft, plan_features = replica.draft, replica.plan.features
    assert draft is not None and draft.model is not None and plan_features is not None
    assert draft.num_passes == k  # the one MTP layer is reused for each further draft
    assert draft.model.layers_per_stage == 1
    # Each pass reads the MTP layer's weights and the target's bf16 LM head, split by TP 8.
    lm_head = ds.vocab_size * ds.hidden_size * 2 // 8
    assert draft.model.weight_bytes == plan_features.speculative_weights_bytes + lm_head
    # The pool holds 61 target MLA layers and the MTP layer's: each side reads its own.
    latent = (512 + 64) * 2  # kv_lora_rank + qk_rope_head_dim, bf16, one latent per token
    assert replica.plan.kv_cache.bytes_per_token == 62 * latent
    assert replica.step_model.kv_bytes_per_token == 61 * latent
    assert draft.model.kv_bytes_per_token == latent
    assert replica.scheduler_config.num_lookahead_tokens == k


def test_a_draft_models_slots_come_out_of_the_step_budget_from_0_17_to_0_27() -> None:
    # vllm/config/vllm.py::_set_max_num_scheduled_tokens (0.17.0 – 0.27.1): max_num_batched_tokens − max_num_seqs ×
    # max_num_new_slots_for_drafting, 1 slot per request for a draft model and none for EAGLE; from 0.28.0 the
    # budget is max_num_batched_tokens.
    changes = {"max_num_seqs": 256, "max_num_batched_tokens": 8192}
    for method, engine, budget in (
        ("draft_model", "vllm-0.16", 8192),
        ("draft_model", "vllm-0.17", 8192 - 256),
        ("draft_model", "vllm-0.27", 8192 - 256),
        ("draft_model", "vllm-0.28", 8192),
        ("eagle", "vllm-0.27", 8192),
        ("ngram", "vllm-0.27", 8192),
    ):
        replica = prepare_replica(_request(method, 3, engine=engine, **changes), coefficients=COEFFS)
        assert replica.scheduler_config.max_num_batched_tokens == budget, (method, engine)
    with pytest.raises(InvalidSpec, match="max_num_scheduled_tokens is set to 0 based on") as found:
        prepare_replica(
            _request("draft_model", 3, engine="vllm-0.27", max_num_seqs=512, max_num_batched_tokens=512),
            coefficients=COEFFS,
        )
    assert found.value.field == "max_num_batched_tokens"
