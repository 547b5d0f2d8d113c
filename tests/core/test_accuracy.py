"""The accuracy bar as a test: kvcap against recorded real vLLM start-ups (``make accuracy`` prints the report).

* the held-back split's median |KV-token error| is within the issue's 5 % (also with every (model, engine) group
  counted once, so seven runs of one model cannot carry it);
* ``weights.py`` alone reproduces every high-confidence "Model loading took X GiB" line within 4 % (known
  outlier: gpt-oss-20b at TP2 on Hopper −3.6 %, its MXFP4 expert layout; the median is well under 1 %);
* with the KV budget given (``kv_cache_memory_bytes``) no estimate is involved: the block count vLLM logged lies
  between the counts for the logged "Available KV cache memory" ± its 0.005 GiB rounding.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from bench.accuracy import (
    BAR_PERCENT,
    UNSEEN,
    Outcome,
    check_weights,
    distribution,
    evaluate_all,
    group_medians,
    load_cases,
    metric_errors,
    prepare_all,
    prepare_case,
)
from service.catalog.builtin import builtin_snapshot
from service.core.engines import resolve_engine
from service.core.planner import plan
from service.core.units import GIB

WEIGHT_TOLERANCE_PERCENT = 4.0


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    return evaluate_all(prepare_all())


def test_held_back_median_kv_token_error_meets_the_bar(outcomes: list[Outcome]) -> None:
    held = distribution(metric_errors(outcomes, "tokens", "held"))
    assert held is not None and held.n >= 10
    assert held.median <= BAR_PERCENT
    per_group = group_medians(outcomes, "tokens", "held")
    assert len(per_group) >= 5
    assert statistics.median(per_group) <= BAR_PERCENT


def test_both_splits_are_populated_and_disjoint_by_group(outcomes: list[Outcome]) -> None:
    sides: dict[tuple[str, str], set[str]] = {}
    for o in outcomes:
        if o.prepared.split != UNSEEN:
            key = (o.prepared.model_name or "", o.prepared.engine or "")
            sides.setdefault(key, set()).add(o.prepared.split)
    assert all(len(s) == 1 for s in sides.values())
    assert {o.prepared.split for o in outcomes} == {"fit", "held", UNSEEN}


def test_unseen_cases_are_never_fitted_and_move_no_group() -> None:
    """Cases recorded with ``"split": "held_back"`` keep that split, are left out of the FIT set ``fit()`` uses,
    and the FIT / HELD-BACK side of every other case is the same with and without them."""
    cases = load_cases()
    unseen = [c for c in cases if c.get("split") == UNSEEN]
    assert len(unseen) >= 2
    with_unseen = {p.case_id: p.split for p in prepare_all(cases)}
    without = {p.case_id: p.split for p in prepare_all([c for c in cases if c.get("split") != UNSEEN])}
    assert all(with_unseen[int(c["id"])] == UNSEEN for c in unseen)
    assert {k: v for k, v in with_unseen.items() if v != UNSEEN} == without


def test_high_confidence_weight_observations_are_within_tolerance() -> None:
    checks = [c for c in check_weights() if c.high_confidence and c.error_pct is not None]
    assert len(checks) >= 20
    worst = max(checks, key=lambda c: abs(c.error_pct or 0.0))
    assert abs(worst.error_pct or 0.0) <= WEIGHT_TOLERANCE_PERCENT, worst
    assert statistics.median(abs(c.error_pct or 0.0) for c in checks) <= 0.5


def test_exact_budget_path_reproduces_logged_block_counts(outcomes: list[Outcome]) -> None:
    checked = 0
    for o in outcomes:
        obs, request = o.prepared.observed, o.prepared.request
        engine = resolve_engine(o.prepared.engine)
        # --kv-cache-memory-bytes exists from 0.11: V0 and the V1 logs of 0.9.2 – 0.10 cannot take that path.
        if (
            request is None
            or obs.blocks is None
            or obs.available_gib is None
            or engine.v0
            or not engine.kv_cache_memory_bytes
            # With pipeline stages the log's "Available KV cache memory" is one worker's; vLLM takes the
            # smallest stage's blocks, so one budget does not describe every GPU (case 2014: PP0's line).
            or request.pipeline_parallel_size > 1
        ):
            continue
        counts = []
        for delta in (-0.005, 0.005):
            budget = int((obs.available_gib + delta) * GIB)
            exact = plan(replace(request, kv_cache_memory_bytes=budget, detail=False))
            assert exact.exact
            assert exact.memory.activation_bytes == exact.memory.non_torch_bytes == 0
            assert exact.kv_cache.num_gpu_blocks == budget // exact.kv_cache.bytes_per_block
            counts.append(exact.kv_cache.num_gpu_blocks)
        assert counts[0] <= obs.blocks <= counts[1], (o.prepared.case_id, counts, obs.blocks)
        checked += 1
    assert checked >= 15


def test_expert_parallel_runs_are_planned_per_data_parallel_rank() -> None:
    # Case 2035: Qwen3-Coder-480B-FP8 with -dp=8 --enable-expert-parallel on an H20 stated as 141GB: planned as
    # one DP rank (1/8 of the experts, the attention and the whole KV cache), on the stated capacity.
    prepared = {p.case_id: p for p in prepare_all()}
    case = prepared[2035]
    assert case.model_name == "qwen3-coder-480b-a35b"
    assert not any("expert parallelism" in reason for reason in case.excluded)
    assert case.request is not None and case.request.features is not None
    assert case.request.features.data_parallel_size == 8
    assert case.request.features.enable_expert_parallel
    assert case.request.gpu is not None and case.request.gpu.memory_bytes == 141 * GIB


def test_a_log_that_warns_of_no_flashinfer_is_planned_with_the_sorting_sampler() -> None:
    # vLLM 0.8 – 0.11 print this warning when FlashInfer is not installed; the request then carries it, and a
    # log without it keeps the default (FlashInfer installed, as in the vllm/vllm-openai images).
    case = next(c for c in load_cases() if c["id"] == 2055)
    warning = (
        "WARNING 09-24 20:46:11 [topk_topp_sampler.py:69] FlashInfer is not available. Falling back to the "
        "PyTorch-native implementation of top-p & top-k sampling. For the best performance, please install "
        "FlashInfer."
    )
    snapshot = builtin_snapshot()
    plain = prepare_case(case, snapshot).request
    warned = prepare_case({**case, "excerpt": f"{case['excerpt']}\n{warning}"}, snapshot).request
    assert plain is not None and plain.features is None
    assert warned is not None and warned.features is not None
    assert not warned.features.flashinfer_sampler
    assert plan(warned).memory.activation_bytes > plan(plain).memory.activation_bytes
