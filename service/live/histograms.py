"""vLLM's latency and token histograms: cumulative buckets, the difference between two scrapes, quantiles.

vLLM exports Prometheus histograms (``vllm/v1/metrics/loggers.py::PrometheusStatLogger``, 0.10 to 0.32):

- ``vllm:time_to_first_token_seconds`` — one observation per request, arrival to first token;
- ``vllm:request_time_per_output_token_seconds`` (0.11+) — one per finished request, decode time ÷ decode
  tokens: what ``vllm bench serve`` calls TPOT;
- ``vllm:inter_token_latency_seconds`` (0.11+) and its pre-0.11 name ``vllm:time_per_output_token_seconds``
  (deprecated in 0.11, hidden in 0.12, removed in 0.13: vllm-project/vllm#24110 and #32661) — one per output
  event, the time since the previous one: what ``vllm bench serve`` calls ITL;
- ``vllm:e2e_request_latency_seconds`` — one per finished request;
- ``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens`` — tokens per finished request;
- ``vllm:iteration_tokens_total`` — tokens scheduled per engine step.

A histogram is cumulative since the server started, so "what happened lately" is the difference of two
scrapes (bucket by bucket); a restart (a count that went down) or changed bucket bounds make the difference
meaningless, and the whole cumulative histogram is used instead. Quantiles follow Prometheus'
``histogram_quantile``: linear interpolation inside the bucket that holds the rank, the lower bound of the
first bucket taken as 0, and the highest finite bound returned when the rank falls in the ``+Inf`` bucket.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

TTFT = "vllm:time_to_first_token_seconds"
REQUEST_TPOT = "vllm:request_time_per_output_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
ITL_OLD = "vllm:time_per_output_token_seconds"  # before 0.11: the same inter-token observations
E2E = "vllm:e2e_request_latency_seconds"
PROMPT_TOKENS = "vllm:request_prompt_tokens"
GENERATION_TOKENS = "vllm:request_generation_tokens"
ITERATION_TOKENS = "vllm:iteration_tokens_total"

HISTOGRAM_NAMES: tuple[str, ...] = (
    TTFT,
    REQUEST_TPOT,
    ITL,
    ITL_OLD,
    E2E,
    PROMPT_TOKENS,
    GENERATION_TOKENS,
    ITERATION_TOKENS,
)
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_SAMPLE_PARTS: dict[str, tuple[str, str]] = {
    name + suffix: (name, suffix) for name in HISTOGRAM_NAMES for suffix in HISTOGRAM_SUFFIXES
}


_BOUNDS: dict[tuple[float, ...], tuple[float, ...]] = {}
"""Every distinct bucket-bound tuple seen, kept once: a fleet's pods share a handful (vLLM's fixed buckets)."""


def _shared_bounds(bounds: tuple[float, ...]) -> tuple[float, ...]:
    if len(_BOUNDS) > 4096:  # unbounded label churn must not grow this forever
        _BOUNDS.clear()
    return _BOUNDS.setdefault(bounds, bounds)


class Histogram:
    """One cumulative histogram: ``buckets`` are (upper bound, cumulative count), ending with +Inf.

    Stored compactly, because the live loop keeps each pod's last read as the baseline of the next window (for
    10,000 pods, ~10^6 buckets): the bounds as one tuple shared by every histogram with the same bounds, the
    counts as a packed ``array`` of doubles — 8 bytes a bucket instead of a pair of two float objects (~100).
    """

    __slots__ = ("_bounds", "_counts", "count", "sum")

    def __init__(self, *, buckets: Iterable[tuple[float, float]], sum: float, count: float) -> None:
        pairs = tuple(buckets)
        self._bounds = _shared_bounds(tuple(float(b) for b, _ in pairs))
        self._counts = array("d", [c for _, c in pairs])  # from a list: allocated to size, not grown
        self.sum = sum
        self.count = count

    @classmethod
    def _of(cls, bounds: tuple[float, ...], counts: array[float], sum: float, count: float) -> Histogram:
        histogram = cls.__new__(cls)
        histogram._bounds, histogram._counts, histogram.sum, histogram.count = bounds, counts, sum, count
        return histogram

    @property
    def buckets(self) -> tuple[tuple[float, float], ...]:
        return tuple(zip(self._bounds, self._counts, strict=True))

    @property
    def bounds(self) -> tuple[float, ...]:
        return self._bounds

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        return (self._bounds, self._counts, self.sum, self.count) == (
            other._bounds,
            other._counts,
            other.sum,
            other.count,
        )

    def __hash__(self) -> int:
        return hash((self._bounds, tuple(self._counts), self.sum, self.count))

    def __repr__(self) -> str:
        return f"Histogram(buckets={self.buckets!r}, sum={self.sum!r}, count={self.count!r})"

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (self._bounds, self._counts, self.sum, self.count))

    def plus(self, other: Histogram) -> Histogram | None:
        """Both histograms together (pods or engines of one deployment); None when the bounds differ."""
        if self._bounds != other._bounds:
            return None
        counts = array("d", [c + d for c, d in zip(self._counts, other._counts, strict=True)])
        return Histogram._of(self._bounds, counts, self.sum + other.sum, self.count + other.count)

    def minus(self, earlier: Histogram) -> Histogram | None:
        """What was observed since ``earlier``; None after a restart (a count went down) or a bounds change."""
        if self._bounds != earlier._bounds or self.count < earlier.count:
            return None
        diff = array("d", [c - d for c, d in zip(self._counts, earlier._counts, strict=True)])
        if any(count < 0 for count in diff):
            return None
        return Histogram._of(self._bounds, diff, self.sum - earlier.sum, self.count - earlier.count)

    def quantile(self, q: float) -> float | None:
        """Prometheus' ``histogram_quantile(q, …)`` over these buckets (None when empty)."""
        if not 0 <= q <= 1 or self.count <= 0 or not self._counts:
            return None
        total = self._counts[-1]
        if total <= 0:
            return None
        rank = q * total
        lower_bound, lower_count = 0.0, 0.0
        for bound, cumulative in zip(self._bounds, self._counts, strict=True):
            if cumulative >= rank:
                if math.isinf(bound):
                    # The rank is above every finite bound: Prometheus returns the highest finite bound.
                    return lower_bound
                in_bucket = cumulative - lower_count
                if in_bucket <= 0:
                    return bound
                return lower_bound + (bound - lower_bound) * (rank - lower_count) / in_bucket
            lower_bound, lower_count = bound, cumulative
        return lower_bound


def _rebuild(bounds: tuple[float, ...], counts: array[float], sum: float, count: float) -> Histogram:
    return Histogram._of(_shared_bounds(bounds), counts, sum, count)


class SeriesLabels(dict[str, str]):
    """A sample's labels with what ``histograms_from_samples`` derives from them worked out once: the series
    (every label but ``le``, sorted) and the bucket bound (``le`` as a float; None when missing or not a
    number). The exposition reader keeps one per distinct label text and hands the same object to every pod
    that reports it, so it is never modified after ``of``."""

    __slots__ = ("bound", "series")
    bound: float | None
    series: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, labels: Mapping[str, str]) -> SeriesLabels:
        made = cls(labels)
        made.series, made.bound = _series_and_bound(labels)
        return made


def _series_and_bound(labels: Mapping[str, str]) -> tuple[tuple[tuple[str, str], ...], float | None]:
    if "le" not in labels:
        return tuple(sorted(labels.items())), None
    other = dict(labels)
    le = other.pop("le")
    try:
        bound: float | None = float(le)
    except ValueError:
        bound = None
    return tuple(sorted(other.items())), bound


def histograms_from_samples(
    samples: Iterable[tuple[str, Mapping[str, str], float]],
) -> dict[str, Histogram]:
    """The histograms named in ``HISTOGRAM_NAMES``, summed over every other label (engines, model names).

    Series whose buckets do not line up with the first one seen are dropped rather than mixed.
    """
    parts: dict[tuple[str, tuple[tuple[str, str], ...]], _Parts] = {}
    for name, labels, value in samples:
        parts_of_name = _SAMPLE_PARTS.get(name)
        if parts_of_name is None:
            continue
        base, suffix = parts_of_name  # ``base`` is the module's constant: no string kept per pod
        if suffix != "_bucket" and not math.isfinite(value):
            continue
        if type(labels) is SeriesLabels:
            series, bound = labels.series, labels.bound
        else:
            series, bound = _series_and_bound(labels)
        entry = parts.get((base, series))
        if entry is None:
            entry = parts[base, series] = _Parts()
        if suffix == "_bucket":
            if bound is not None:
                entry.buckets[bound] = value
        elif suffix == "_sum":
            entry.sum = value
        else:
            entry.count = value
    out: dict[str, Histogram] = {}
    for (base, _series), entry in sorted(parts.items(), key=lambda item: item[0]):
        buckets, total, count = entry.buckets, entry.sum, entry.count
        if not buckets or count is None or total is None:
            continue
        if math.inf not in buckets:
            buckets[math.inf] = count
        histogram = Histogram(buckets=tuple(sorted(buckets.items())), sum=total, count=count)
        if base in out:
            combined = out[base].plus(histogram)
            if combined is not None:
                out[base] = combined
        else:
            out[base] = histogram
    return out


class _Parts:
    """The samples of one series of one histogram, as they are read."""

    __slots__ = ("buckets", "count", "sum")

    def __init__(self) -> None:
        self.buckets: dict[float, float] = {}
        self.sum: float | None = None
        self.count: float | None = None


Window = Literal["since_last_scrape", "since_start"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Distribution:
    """Mean, median and 99th percentile of one histogram over a window."""

    mean: float | None
    p50: float | None
    p99: float | None
    count: float
    window: Window

    @classmethod
    def of(cls, histogram: Histogram, window: Window) -> Distribution:
        return cls(
            mean=histogram.mean,
            p50=histogram.quantile(0.5),
            p99=histogram.quantile(0.99),
            count=histogram.count,
            window=window,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyObservation:
    """What a deployment's histograms say about its recent traffic (``None`` = not reported or no requests).

    ``tpot`` is vLLM's per-request time per output token when the server reports it (0.11+), otherwise the
    inter-token latency, which is the same quantity at one token per output event (no speculative decoding).
    """

    ttft: Distribution | None = None
    tpot: Distribution | None = None
    itl: Distribution | None = None
    e2e: Distribution | None = None
    prompt_tokens: Distribution | None = None
    generation_tokens: Distribution | None = None
    iteration_tokens: Distribution | None = None
    interval_seconds: float | None = None
    """Seconds between the two scrapes the window spans (None for a since-start window)."""

    @property
    def request_rate(self) -> float | None:
        """Finished requests per second over the window (only for a since-last-scrape window)."""
        if self.e2e is None or self.interval_seconds is None or self.interval_seconds <= 0:
            return None
        if self.e2e.window != "since_last_scrape":
            return None
        return self.e2e.count / self.interval_seconds


def _distribution(
    histograms: Mapping[str, Histogram], names: tuple[str, ...], window: Window
) -> Distribution | None:
    """The first of ``names`` with observations in the window."""
    for name in names:
        histogram = histograms.get(name)
        if histogram is not None and histogram.count > 0:
            return Distribution.of(histogram, window)
    return None


def observe_latency(
    histograms: Mapping[str, Histogram], *, window: Window, interval_seconds: float | None = None
) -> LatencyObservation | None:
    """A ``LatencyObservation`` from a deployment's summed histograms over one window (None when empty)."""
    itl = _distribution(histograms, (ITL, ITL_OLD), window)
    observation = LatencyObservation(
        ttft=_distribution(histograms, (TTFT,), window),
        tpot=_distribution(histograms, (REQUEST_TPOT,), window) or itl,
        itl=itl,
        e2e=_distribution(histograms, (E2E,), window),
        prompt_tokens=_distribution(histograms, (PROMPT_TOKENS,), window),
        generation_tokens=_distribution(histograms, (GENERATION_TOKENS,), window),
        iteration_tokens=_distribution(histograms, (ITERATION_TOKENS,), window),
        interval_seconds=interval_seconds if window == "since_last_scrape" else None,
    )
    if observation.ttft is None and observation.tpot is None and observation.e2e is None:
        return None
    return observation


def sum_histograms(per_pod: Iterable[Mapping[str, Histogram]]) -> dict[str, Histogram]:
    """Histograms of every pod added together, name by name (pods with other bounds are left out)."""
    total: dict[str, Histogram] = {}
    for histograms in per_pod:
        for name, histogram in histograms.items():
            if name not in total:
                total[name] = histogram
                continue
            combined = total[name].plus(histogram)
            if combined is not None:
                total[name] = combined
    return total
