"""vLLM's result numbers from a hand-made trace (vllm/benchmarks/serve.py::calculate_metrics)."""

from __future__ import annotations

import math

import pytest

from service.core.serving.metrics import (
    RESULT_KEYS,
    RequestOutcome,
    calculate_metrics,
    percentile,
    weighted_percentile,
)

# Keys `vllm bench serve --save-result` writes for a generation run (scalar ones; serve.py::benchmark with the
# default --percentile-metrics ttft,tpot,itl plus e2el and --metric-percentiles 99).
VLLM_SCALAR_KEYS = {
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    *(
        f"{stat}_{metric}_ms"
        for metric in ("ttft", "tpot", "itl", "e2el")
        for stat in ("mean", "median", "std", "p99")
    ),
}


def test_result_keys_are_vllms() -> None:
    assert set(RESULT_KEYS) == VLLM_SCALAR_KEYS


def test_percentile_interpolates_linearly_like_numpy() -> None:
    # np.percentile([1, 2, 3, 4], 99) = 3 + 0.97 × (4 − 3) = 3.97; median of [1, 2, 3, 4] = 2.5.
    assert math.isclose(percentile([4, 1, 3, 2], 99), 3.97)
    assert math.isclose(percentile([4, 1, 3, 2], 50), 2.5)
    assert percentile([], 50) == 0.0


def test_weighted_percentile_equals_the_expanded_list() -> None:
    samples = [(1.0, 3), (5.0, 1), (2.0, 2)]
    expanded = [1.0, 1.0, 1.0, 5.0, 2.0, 2.0]
    for q in (0, 10, 50, 90, 99, 100):
        assert math.isclose(weighted_percentile(samples, q), percentile(expanded, q))


def test_metrics_of_a_two_request_trace() -> None:
    # A: sent 0, first token 0.1, last token 0.5, 5 output tokens (gaps 0.1 each).
    # B: sent 0.2, first token 0.4, last token 0.6, 3 output tokens (gaps 0.1 each); C failed.
    outcomes = [
        RequestOutcome(
            prompt_tokens=10,
            output_tokens=5,
            send_seconds=0.0,
            first_token_seconds=0.1,
            finish_seconds=0.5,
            success=True,
        ),
        RequestOutcome(
            prompt_tokens=20,
            output_tokens=3,
            send_seconds=0.2,
            first_token_seconds=0.4,
            finish_seconds=0.6,
            success=True,
        ),
        RequestOutcome(
            prompt_tokens=30,
            output_tokens=9,
            send_seconds=0.3,
            first_token_seconds=-1,
            finish_seconds=-1,
            success=False,
        ),
    ]
    result = calculate_metrics(
        outcomes, duration_seconds=0.6, itl_samples=[(0.1, 6)], itl_count=6, itl_sum_seconds=0.6
    )
    assert result.completed == 2 and result.failed == 1
    assert result.total_input_tokens == 30 and result.total_output_tokens == 8
    assert math.isclose(result.request_throughput, 2 / 0.6)
    assert math.isclose(result.output_throughput, 8 / 0.6)
    assert math.isclose(result.total_token_throughput, 38 / 0.6)
    # TTFT 100 and 200 ms: mean 150, median 150, std 50 (population), p99 = 100 + 0.99 × 100.
    assert math.isclose(result.mean_ttft_ms, 150.0)
    assert math.isclose(result.std_ttft_ms, 50.0)
    assert math.isclose(result.p99_ttft_ms, 199.0)
    # TPOT = (latency − TTFT) / (output − 1): A (0.5 − 0.1) / 4 = 100 ms; B (0.4 − 0.2) / 2 = 100 ms.
    assert math.isclose(result.mean_tpot_ms, 100.0)
    # E2EL 500 and 400 ms.
    assert math.isclose(result.mean_e2el_ms, 450.0)
    assert math.isclose(result.median_e2el_ms, 450.0)
    assert math.isclose(result.mean_itl_ms, 100.0) and math.isclose(result.p99_itl_ms, 100.0)
    # Both requests overlap during [0.2, 0.5): peak concurrency 2.
    assert result.max_concurrent_requests == 2


def test_single_token_requests_have_no_tpot() -> None:
    outcomes = [
        RequestOutcome(
            prompt_tokens=5,
            output_tokens=1,
            send_seconds=0.0,
            first_token_seconds=0.2,
            finish_seconds=0.2,
            success=True,
        )
    ]
    result = calculate_metrics(
        outcomes, duration_seconds=0.2, itl_samples=[], itl_count=0, itl_sum_seconds=0.0
    )
    assert result.mean_tpot_ms == 0.0 and result.p99_tpot_ms == 0.0  # np.mean([] or 0) = 0
    assert result.mean_ttft_ms == pytest.approx(200.0)
