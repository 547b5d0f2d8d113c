"""The numbers ``vllm bench serve --save-result`` writes, from a simulated trace (stage 6).

``vllm/benchmarks/serve.py::calculate_metrics`` and ``benchmark`` (vLLM 0.11 – 0.33), per successful request:

* TTFT = first token received − request sent; E2EL (``latency``) = last token − sent;
* TPOT = (latency − TTFT) / (output_len − 1), only for requests with more than one output token;
* ITL = every gap between consecutive tokens of every request, pooled;
* ``duration`` = from the benchmark start to the last response (``time.perf_counter`` around the whole run);
* throughputs = totals / duration; ``output_throughput`` counts generated tokens, ``total_token_throughput``
  prompt + generated;
* statistics in milliseconds: ``mean_*`` (``np.mean``), ``median_*`` (``np.median``), ``std_*`` (``np.std``,
  population), ``p99_*`` (``np.percentile`` with linear interpolation; 99 is ``--metric-percentiles``'
  default), for ``ttft``, ``tpot``, ``itl`` and ``e2el``; an empty list counts as ``[0]`` (``np.mean(x or 0)``).

``max_output_tokens_per_s`` and ``max_concurrent_requests`` are computed like vLLM: output tokens per
one-second bucket from the first send, and the peak of the [start, end) intervals.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import NamedTuple, Protocol

RESULT_PERCENTILE = 99.0
METRIC_NAMES = ("ttft", "tpot", "itl", "e2el")


def percentile(values: Sequence[float], q: float) -> float:
    """``np.percentile(values, q)`` (linear interpolation between closest ranks); ``[]`` → 0."""
    if not values:
        return 0.0
    return _percentile_of_sorted(sorted(values), q)


def _percentile_of_sorted(ordered: Sequence[float], q: float) -> float:
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    fraction = position - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


def weighted_percentiles(samples: Sequence[tuple[float, float]], qs: Sequence[float]) -> tuple[float, ...]:
    """Percentiles of a list given as (value, multiplicity) pairs, as if each value were repeated.

    Integer weights give exactly ``np.percentile`` of the expanded list; fractional weights (decode stretches
    summarised by a few samples) interpolate the same way on the cumulative weight.
    """
    items = sorted(samples)
    values = [v for v, w in items if w > 0]
    cumulative: list[float] = []
    running = 0.0
    for _, w in items:
        if w > 0:
            running += w
            cumulative.append(running)
    if not values:
        return tuple(0.0 for _ in qs)

    def value_at(rank: float) -> float:
        # first value whose cumulative weight exceeds the 0-based rank
        i = bisect.bisect_right(cumulative, rank)
        return values[min(i, len(values) - 1)]

    out = []
    for q in qs:
        position = (running - 1) * q / 100.0 if running >= 1 else 0.0
        low = math.floor(position)
        fraction = position - low
        v_low = value_at(low)
        v_high = value_at(low + 1) if fraction > 0 else v_low
        out.append(v_low + (v_high - v_low) * fraction)
    return tuple(out)


def weighted_percentile(samples: Sequence[tuple[float, float]], q: float) -> float:
    return weighted_percentiles(samples, (q,))[0]


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def std(values: Sequence[float]) -> float:
    """``np.std`` (population standard deviation)."""
    if not values:
        return 0.0
    m = mean(values)
    return math.sqrt(sum([(v - m) ** 2 for v in values]) / len(values))  # a list sums in the same order


def weighted_std(samples: Sequence[tuple[float, float]], mean_value: float) -> float:
    total = sum([w for _, w in samples])
    if total <= 0:
        return 0.0
    return math.sqrt(sum([w * (v - mean_value) ** 2 for v, w in samples]) / total)


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchmarkResult:
    """Attribute names are the keys of vLLM's result JSON (the scalar ones)."""

    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    mean_ttft_ms: float
    median_ttft_ms: float
    std_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    std_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    median_itl_ms: float
    std_itl_ms: float
    p99_itl_ms: float
    mean_e2el_ms: float
    median_e2el_ms: float
    std_e2el_ms: float
    p99_e2el_ms: float

    def as_dict(self) -> dict[str, float | int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


RESULT_KEYS = tuple(f.name for f in fields(BenchmarkResult))


class RequestOutcome(NamedTuple):
    """One request as the client saw it (times in seconds from the benchmark start); a named tuple, which
    a simulation builds per request at a fraction of a frozen dataclass's cost."""

    prompt_tokens: int
    output_tokens: int
    send_seconds: float
    first_token_seconds: float
    finish_seconds: float
    success: bool


def _stats(values_seconds: Sequence[float]) -> tuple[float, float, float, float]:
    ms = [v * 1000.0 for v in values_seconds]
    if not ms:
        return 0.0, 0.0, 0.0, 0.0
    ordered = sorted(ms)  # once for both percentiles; mean and std sum in the original order
    return (
        mean(ms),
        _percentile_of_sorted(ordered, 50.0),
        std(ms),
        _percentile_of_sorted(ordered, RESULT_PERCENTILE),
    )


def _peak_concurrency(outcomes: Sequence[CompletedRequest]) -> int:
    events = [(o.send_seconds, 1) for o in outcomes] + [(o.finish_seconds, -1) for o in outcomes]
    events.sort()  # departures (-1) before arrivals (+1) at equal times: half-open intervals
    current = peak = 0
    for _, delta in events:
        current += delta
        if current > peak:
            peak = current
    return peak


def _peak_tokens_per_second(
    outcomes: Sequence[CompletedRequest], token_times: Sequence[tuple[float, float]], start: float
) -> float:
    """Output tokens per one-second bucket from the first send (``token_times``: (time, tokens) pairs)."""
    if not outcomes:
        return 0.0
    buckets: dict[int, float] = {}
    for time_seconds, tokens in token_times:
        bucket = int(time_seconds - start)
        buckets[bucket] = buckets.get(bucket, 0.0) + tokens
    return max(buckets.values()) if buckets else 0.0


class LatencySummary(NamedTuple):
    """The TTFT and TPOT statistics of ``calculate_metrics`` alone (an SLO check needs no other figure);
    each equals the ``BenchmarkResult`` field of the same name, computed the same way."""

    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    p99_tpot_ms: float


def _location_stats(values_seconds: Sequence[float]) -> tuple[float, float, float]:
    """``_stats`` without the standard deviation: (mean, median, p99) in milliseconds."""
    ms = [v * 1000.0 for v in values_seconds]
    if not ms:
        return 0.0, 0.0, 0.0
    ordered = sorted(ms)
    return mean(ms), _percentile_of_sorted(ordered, 50.0), _percentile_of_sorted(ordered, RESULT_PERCENTILE)


class CompletedRequest(Protocol):
    """What ``latency_summary_of`` and ``metrics_of`` read of a request that got every token (a ``RequestOutcome`` with
    ``success``, or the engine's own request state)."""

    @property
    def prompt_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def send_seconds(self) -> float: ...
    @property
    def first_token_seconds(self) -> float: ...
    @property
    def finish_seconds(self) -> float: ...


def latency_summary(outcomes: Sequence[RequestOutcome]) -> LatencySummary:
    """``calculate_metrics``' TTFT and TPOT mean, median and p99, without the rest of the result."""
    return latency_summary_of([o for o in outcomes if o.success])


def latency_summary_of(ok: Sequence[CompletedRequest]) -> LatencySummary:
    """``latency_summary`` of the successful requests alone, in their order (no outcome built per request)."""
    ttft = _location_stats([o.first_token_seconds - o.send_seconds for o in ok])
    tpot = _location_stats(
        [
            (o.finish_seconds - o.first_token_seconds) / (o.output_tokens - 1)
            for o in ok
            if o.output_tokens > 1
        ]
    )
    return LatencySummary(*ttft, *tpot)


def request_throughput(completed: int, duration_seconds: float) -> float:
    """``BenchmarkResult.request_throughput``: completed requests per second of the run."""
    return completed / (duration_seconds if duration_seconds > 0 else 1e-12)


def calculate_metrics(
    outcomes: Sequence[RequestOutcome],
    *,
    duration_seconds: float,
    itl_samples: Sequence[tuple[float, float]],
    itl_count: int,
    itl_sum_seconds: float,
    token_times: Sequence[tuple[float, float]] = (),
) -> BenchmarkResult:
    return metrics_of(
        [o for o in outcomes if o.success],
        failed=sum(1 for o in outcomes if not o.success),
        duration_seconds=duration_seconds,
        itl_samples=itl_samples,
        itl_count=itl_count,
        itl_sum_seconds=itl_sum_seconds,
        token_times=token_times,
    )


def metrics_of(
    ok: Sequence[CompletedRequest],
    *,
    failed: int,
    duration_seconds: float,
    itl_samples: Sequence[tuple[float, float]],
    itl_count: int,
    itl_sum_seconds: float,
    token_times: Sequence[tuple[float, float]] = (),
) -> BenchmarkResult:
    """``calculate_metrics`` from the successful requests alone, in their order, and the count of the others
    (no outcome built per request)."""
    ttfts = [o.first_token_seconds - o.send_seconds for o in ok]
    e2els = [o.finish_seconds - o.send_seconds for o in ok]
    tpots = [
        (o.finish_seconds - o.first_token_seconds) / (o.output_tokens - 1) for o in ok if o.output_tokens > 1
    ]
    total_in = sum(o.prompt_tokens for o in ok)
    total_out = sum(o.output_tokens for o in ok)
    duration = duration_seconds if duration_seconds > 0 else 1e-12
    ttft = _stats(ttfts)
    tpot = _stats(tpots)
    e2el = _stats(e2els)
    itl_mean = itl_sum_seconds / itl_count * 1000.0 if itl_count else 0.0
    itl_ms = [(v * 1000.0, w) for v, w in itl_samples]
    itl_median, itl_p99 = weighted_percentiles(itl_ms, (50.0, RESULT_PERCENTILE))
    start = min((o.send_seconds for o in ok), default=0.0)
    return BenchmarkResult(
        duration=duration_seconds,
        completed=len(ok),
        failed=failed,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=request_throughput(len(ok), duration_seconds),
        output_throughput=total_out / duration,
        total_token_throughput=(total_in + total_out) / duration,
        max_output_tokens_per_s=_peak_tokens_per_second(ok, token_times, start),
        max_concurrent_requests=_peak_concurrency(ok),
        mean_ttft_ms=ttft[0],
        median_ttft_ms=ttft[1],
        std_ttft_ms=ttft[2],
        p99_ttft_ms=ttft[3],
        mean_tpot_ms=tpot[0],
        median_tpot_ms=tpot[1],
        std_tpot_ms=tpot[2],
        p99_tpot_ms=tpot[3],
        mean_itl_ms=itl_mean,
        median_itl_ms=itl_median,
        std_itl_ms=weighted_std(itl_ms, itl_mean),
        p99_itl_ms=itl_p99,
        mean_e2el_ms=e2el[0],
        median_e2el_ms=e2el[1],
        std_e2el_ms=e2el[2],
        p99_e2el_ms=e2el[3],
    )
