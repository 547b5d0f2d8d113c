"""vLLM's latency and token histograms: read from the real 0.32 exposition and from the pre-0.11 names, summed
over engines, differenced between two scrapes (restarts fall back to since-start), and their quantiles computed
the way Prometheus' histogram_quantile does."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from service.live.histograms import (
    E2E,
    ITL_OLD,
    TTFT,
    Histogram,
    observe_latency,
)
from service.live.manager import LiveTarget, aggregate
from service.live.parser import parse_vllm_metrics
from service.live.schemas import parse_live_source
from service.live.scraper import TargetResult


@pytest.fixture(scope="module")
def busy(vllm_metrics_dir: Path) -> str:
    return (vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_text()


def test_reads_the_time_to_first_token_histogram_of_the_real_busy_exposition(busy: str) -> None:
    ttft = parse_vllm_metrics(busy).histograms[TTFT]
    # The exposition's own lines: count 21, sum 0.32380056381225586, 3 requests ≤ 10 ms, 16 ≤ 20 ms, 21 ≤ 40 ms.
    assert ttft.count == 21
    assert ttft.sum == pytest.approx(0.32380056381225586)
    assert ttft.mean == pytest.approx(0.32380056381225586 / 21)
    assert dict(ttft.buckets)[0.01] == 3 and dict(ttft.buckets)[0.02] == 16 and dict(ttft.buckets)[0.04] == 21
    # Median: rank 10.5 lies in (0.01, 0.02], which holds requests 4..16 → 0.01 + 0.01 × (10.5 − 3) / 13.
    assert ttft.quantile(0.5) == pytest.approx(0.01 + 0.01 * 7.5 / 13)
    # p99: rank 20.79 lies in (0.02, 0.04], requests 17..21 → 0.02 + 0.02 × (20.79 − 16) / 5.
    assert ttft.quantile(0.99) == pytest.approx(0.02 + 0.02 * 4.79 / 5)


def test_the_per_request_tpot_histogram_is_the_tpot_and_the_inter_token_one_the_itl(busy: str) -> None:
    histograms = parse_vllm_metrics(busy).histograms
    latency = observe_latency(histograms, window="since_start")
    assert latency is not None and latency.tpot is not None and latency.itl is not None
    assert latency.tpot.count == 13  # one per finished request
    assert latency.tpot.mean == pytest.approx(0.029591769579026702 / 13)
    assert latency.itl.count == 24008  # one per output event
    assert latency.itl.mean == pytest.approx(57.364714399999116 / 24008)
    assert latency.prompt_tokens is not None and latency.prompt_tokens.mean == pytest.approx(91 / 13)
    assert latency.generation_tokens is not None
    assert latency.generation_tokens.mean == pytest.approx(14420 / 13)
    assert latency.request_rate is None  # a since-start window has no interval


def test_the_idle_exposition_has_histograms_but_no_latency_to_report(vllm_metrics_dir: Path) -> None:
    metrics = parse_vllm_metrics((vllm_metrics_dir / "vllm-0.32.0-cpu-idle.txt").read_text())
    assert metrics.histograms[TTFT].count == 0
    assert observe_latency(metrics.histograms, window="since_start") is None


def exposition(name: str, buckets: dict[str, float], total: float, *, engine: str | None = "0") -> str:
    labels = f'engine="{engine}",model_name="m"' if engine is not None else 'model_name="m"'
    count = buckets["+Inf"]
    lines = [f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{{labels},le="{le}"}} {value}' for le, value in buckets.items()]
    lines += [f"{name}_sum{{{labels}}} {total}", f"{name}_count{{{labels}}} {count}"]
    return "\n".join(lines) + "\n"


def test_before_0_11_the_inter_token_histogram_had_the_tpot_name_and_stands_in_for_tpot() -> None:
    text = exposition(ITL_OLD, {"0.01": 10.0, "0.025": 30.0, "+Inf": 40.0}, 0.8, engine=None)
    latency = observe_latency(parse_vllm_metrics(text).histograms, window="since_start")
    assert latency is not None and latency.tpot is not None
    assert latency.itl == latency.tpot
    assert latency.tpot.mean == pytest.approx(0.8 / 40)
    # p50: rank 20 in (0.01, 0.025] holding 10..30 → 0.01 + 0.015 × 10 / 20.
    assert latency.tpot.p50 == pytest.approx(0.01 + 0.015 * 10 / 20)


def test_data_parallel_engines_add_up_bucket_by_bucket() -> None:
    text = exposition(TTFT, {"0.1": 1.0, "1.0": 2.0, "+Inf": 2.0}, 0.6) + exposition(
        TTFT, {"0.1": 3.0, "1.0": 4.0, "+Inf": 4.0}, 1.0, engine="1"
    ).replace(f"# TYPE {TTFT} histogram\n", "")
    ttft = parse_vllm_metrics(text).histograms[TTFT]
    assert ttft.buckets == ((0.1, 4.0), (1.0, 6.0), (math.inf, 6.0))
    assert ttft.sum == pytest.approx(1.6)
    assert ttft.count == 6


def test_a_rank_in_the_inf_bucket_is_the_highest_finite_bound_as_in_prometheus() -> None:
    histogram = Histogram(buckets=((0.5, 1.0), (2.0, 2.0), (math.inf, 10.0)), sum=50.0, count=10.0)
    assert histogram.quantile(0.99) == 2.0
    assert histogram.quantile(0.05) == pytest.approx(0.25)  # rank 0.5 in [0, 0.5] holding 1
    assert Histogram(buckets=((math.inf, 0.0),), sum=0.0, count=0.0).quantile(0.5) is None


def test_the_difference_of_two_scrapes_is_what_happened_between_them_and_a_restart_is_none() -> None:
    before = Histogram(buckets=((0.1, 5.0), (1.0, 8.0), (math.inf, 8.0)), sum=2.0, count=8.0)
    after = Histogram(buckets=((0.1, 5.0), (1.0, 18.0), (math.inf, 18.0)), sum=7.0, count=18.0)
    diff = after.minus(before)
    assert diff is not None
    assert diff.buckets == ((0.1, 0.0), (1.0, 10.0), (math.inf, 10.0))
    assert diff.mean == pytest.approx(0.5)
    assert before.minus(after) is None  # the server restarted: counts went down
    other_bounds = Histogram(buckets=((0.2, 1.0), (math.inf, 1.0)), sum=0.1, count=1.0)
    assert after.minus(other_bounds) is None


def result_of(text: str, url: str = "http://10.0.0.5:8000/metrics") -> TargetResult:
    return TargetResult(
        url=url,
        ok=True,
        reason=None,
        duration_s=0.01,
        metrics=parse_vllm_metrics(text),
        pod="10.0.0.5:8000",
    )


TARGET = LiveTarget(
    namespace="llm", name="chat", source=parse_live_source({"scrape_urls": ["http://10.0.0.5:8000/metrics"]})
)


def scrape(ttft: dict[str, float], ttft_sum: float, e2e_count: float) -> str:
    return exposition(TTFT, ttft, ttft_sum) + exposition(
        E2E, {"10.0": e2e_count, "+Inf": e2e_count}, e2e_count
    )


def test_a_deployment_reports_latency_since_the_previous_refresh_and_the_request_rate() -> None:
    first = aggregate(
        TARGET,
        [result_of(scrape({"0.1": 4.0, "1.0": 4.0, "+Inf": 4.0}, 0.2, 4.0))],
        observed_at_s=100.0,
        duration_s=0,
    )
    assert first.latency is not None and first.latency.ttft is not None
    assert first.latency.ttft.window == "since_start"
    assert first.latency.ttft.mean == pytest.approx(0.05)
    second = aggregate(
        TARGET,
        [result_of(scrape({"0.1": 4.0, "1.0": 14.0, "+Inf": 14.0}, 5.2, 24.0))],
        observed_at_s=110.0,
        duration_s=0,
        previous=first,
    )
    assert second.latency is not None and second.latency.ttft is not None
    assert second.latency.ttft.window == "since_last_scrape"
    assert second.latency.ttft.count == 10
    assert second.latency.ttft.mean == pytest.approx(0.5)  # (5.2 − 0.2) / 10
    assert second.latency.request_rate == pytest.approx(2.0)  # 20 finished requests in 10 s


def test_a_restarted_pod_falls_back_to_its_cumulative_histograms() -> None:
    first = aggregate(
        TARGET,
        [result_of(scrape({"0.1": 40.0, "1.0": 40.0, "+Inf": 40.0}, 2.0, 40.0))],
        observed_at_s=100.0,
        duration_s=0,
    )
    restarted = aggregate(
        TARGET,
        [result_of(scrape({"0.1": 0.0, "1.0": 2.0, "+Inf": 2.0}, 1.0, 2.0))],
        observed_at_s=110.0,
        duration_s=0,
        previous=first,
    )
    assert restarted.latency is not None and restarted.latency.ttft is not None
    assert restarted.latency.ttft.window == "since_start"
    assert restarted.latency.ttft.mean == pytest.approx(0.5)
    assert restarted.latency.request_rate is None
