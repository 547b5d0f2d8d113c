"""``GET /metrics``: kvcap's predictions next to what vLLM reports, as Prometheus metrics.

A custom Collector over immutable snapshots (prometheus client_python, "Custom Collectors"): ``collect()`` does
no I/O and takes no lock on anything slow — the live data was read by ``LiveManager``'s background task, the
predictions were computed when deployments changed — so a scrape of kvcap costs only the rendering, whatever
the state of the vLLM fleet. Each render uses a fresh ``CollectorRegistry``: nothing is registered globally,
and a deployment that disappears simply stops being exported.

Names, types, help texts and labels come from ``service.exporter.names`` (the table dashboards and alert rules
are checked against).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from service.exporter.names import METRICS, MetricName
from service.live.manager import DeploymentKey, DeploymentObservation, LiveManager

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Media type of ``render_metrics`` output (the classic text format ``generate_latest`` writes)."""

_SPECS: Mapping[str, MetricName] = {m.name: m for m in METRICS}
_Add = Callable[[str, list[str], float], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictedCapacity:
    """kvcap's prediction for one replica of a registered deployment, and the replica counts around it."""

    num_gpu_blocks: int
    num_gpu_blocks_uncalibrated: int
    kv_cache_size_tokens: int
    max_concurrency: float
    """Requests of max_model_len tokens one replica's KV cache holds at once."""
    max_num_seqs: int
    """vLLM's scheduler cap on running requests per replica."""
    recommended_replicas: int | None
    replicas: int
    """Replicas registered for the deployment."""

    @property
    def concurrent_capacity(self) -> float:
        """Requests one replica can run at once: the smaller of the KV-cache and scheduler limits."""
        return min(self.max_concurrency, float(self.max_num_seqs))


@dataclass(frozen=True, slots=True, kw_only=True)
class SelfMetrics:
    """The live refresher's own health (``kvcap_last_refresh_timestamp_seconds`` and friends)."""

    last_refresh_timestamp_seconds: float | None = None
    refresh_duration_seconds: float | None = None
    deployments_tracked: int = 0

    @classmethod
    def of(cls, manager: LiveManager) -> SelfMetrics:
        return cls(
            last_refresh_timestamp_seconds=manager.last_refresh_timestamp_s,
            refresh_duration_seconds=manager.last_refresh_duration_s,
            deployments_tracked=manager.deployments_tracked,
        )


DEFAULT_ADMISSION_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)


@dataclass(frozen=True, slots=True)
class AdmissionSnapshot:
    reviews: Mapping[tuple[str, str], int]
    """Reviews answered, by (verdict, kind)."""
    buckets: tuple[tuple[float, int], ...]
    """(upper bound, cumulative count), ending with +Inf."""
    sum_s: float
    count: int
    unevaluated: Mapping[str, int] = field(default_factory=dict)
    """Parts of reviewed objects that were not evaluated, by reason (``unknown_model``, ``error`` …)."""


class AdmissionMetrics:
    """Counters and a duration histogram the admission webhook updates, read by the collector.

    A plain object rather than prometheus-client metrics on the global default registry: kvcap renders every
    scrape from a fresh registry, and tests get a clean instance instead of process-wide state.
    """

    def __init__(self, buckets: tuple[float, ...] = DEFAULT_ADMISSION_BUCKETS) -> None:
        self._bounds = tuple(sorted(buckets))
        self._lock = threading.Lock()
        self._reviews: dict[tuple[str, str], int] = {}
        self._bucket_counts = [0] * (len(self._bounds) + 1)  # last = above every bound (+Inf only)
        self._sum_s = 0.0
        self._count = 0
        self._unevaluated: dict[str, int] = {}

    def observe(self, *, verdict: str, kind: str, duration_seconds: float) -> None:
        """Count one answered review (``verdict``: allowed | denied | warned | error …, ``kind``: object kind)."""
        with self._lock:
            key = (verdict, kind)
            self._reviews[key] = self._reviews.get(key, 0) + 1
            self._bucket_counts[bisect.bisect_left(self._bounds, duration_seconds)] += 1
            self._sum_s += duration_seconds
            self._count += 1

    def observe_unevaluated(self, *, reason: str) -> None:
        """Count one part of a review that kvcap could not evaluate (it was answered with a warning)."""
        with self._lock:
            self._unevaluated[reason] = self._unevaluated.get(reason, 0) + 1

    def snapshot(self) -> AdmissionSnapshot:
        with self._lock:
            cumulative: list[tuple[float, int]] = []
            running = 0
            for bound, count in zip((*self._bounds, math.inf), self._bucket_counts, strict=True):
                running += count
                cumulative.append((bound, running))
            return AdmissionSnapshot(
                dict(self._reviews), tuple(cumulative), self._sum_s, self._count, dict(self._unevaluated)
            )


admission_metrics = AdmissionMetrics()
"""The process-wide instance the admission webhook increments and ``/metrics`` reads."""


def _family(spec: MetricName) -> GaugeMetricFamily | CounterMetricFamily:
    if spec.kind == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=list(spec.labels))
    return GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))


def _bound_text(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class KvcapCollector(Collector):
    """Yields every ``kvcap_*`` metric from the snapshots it was given; ``collect()`` does no I/O.

    Per deployment (labels ``namespace``, ``deployment``), from the prediction::

        kvcap_predicted_kv_cache_blocks{namespace="llm",deployment="chat"} 28160.0
        kvcap_predicted_kv_cache_blocks_uncalibrated{namespace="llm",deployment="chat"} 28312.0
        kvcap_predicted_kv_cache_tokens{namespace="llm",deployment="chat"} 450560.0
        kvcap_predicted_max_concurrency{namespace="llm",deployment="chat"} 3.4375
        kvcap_recommended_replicas{namespace="llm",deployment="chat"} 4.0   (when a workload is registered)
        kvcap_deployment_replicas{namespace="llm",deployment="chat"} 3.0

    from the live observation (per pod with the extra ``pod`` label, per target with ``target``)::

        kvcap_observed_kv_cache_blocks{namespace="llm",deployment="chat"} 28160.0   (low median over pods)
        kvcap_observed_pod_kv_cache_blocks{namespace="llm",deployment="chat",pod="chat-0"} 28160.0
        kvcap_observed_kv_cache_usage_ratio{namespace="llm",deployment="chat"} 0.42   (mean over pods)
        kvcap_observed_pod_kv_cache_usage_ratio{namespace="llm",deployment="chat",pod="chat-0"} 0.40
        kvcap_observed_requests_running{namespace="llm",deployment="chat"} 12.0   (sum over pods)
        kvcap_observed_requests_waiting{namespace="llm",deployment="chat"} 0.0
        kvcap_observed_preemptions_total{namespace="llm",deployment="chat"} 3.0
        kvcap_observed_replicas{namespace="llm",deployment="chat"} 3.0
        kvcap_target_up{namespace="llm",deployment="chat",target="http://10.0.0.5:8000/metrics"} 1.0
        kvcap_scrape_duration_seconds{namespace="llm",deployment="chat"} 0.012
        kvcap_scrape_errors_total{namespace="llm",deployment="chat",reason="timeout"} 2.0

    derived, when both sides exist::

        kvcap_prediction_error_ratio{namespace="llm",deployment="chat"} 0.0
            predicted / observed blocks − 1; only when observed blocks > 0
        kvcap_capacity_headroom_ratio{namespace="llm",deployment="chat"} 0.25
            1 − (running + waiting) / (min(max_concurrency, max_num_seqs) × observed replicas); only with ≥ 1
            observed replica; negative when more requests are queued than the replicas can hold

    and for kvcap itself (no labels, except the admission counter)::

        kvcap_last_refresh_timestamp_seconds 1.7e+09
        kvcap_refresh_duration_seconds 0.8
        kvcap_deployments_tracked 1000.0
        kvcap_admission_reviews_total{verdict="denied",kind="Deployment"} 1.0
        kvcap_admission_review_duration_seconds_bucket{le="0.005"} 1.0   (+ _sum, _count)
    """

    def __init__(
        self,
        predictions: Mapping[DeploymentKey, PredictedCapacity],
        observations: Mapping[DeploymentKey, DeploymentObservation],
        self_metrics: SelfMetrics | None = None,
        admission: AdmissionMetrics | None = None,
    ) -> None:
        self._predictions = predictions
        self._observations = observations
        self._self = self_metrics or SelfMetrics(deployments_tracked=len(observations))
        self._admission = admission if admission is not None else admission_metrics

    def collect(self) -> Iterator[Metric]:
        families = {spec.name: _family(spec) for spec in METRICS if spec.kind != "histogram"}

        def add(name: str, labels: list[str], value: float) -> None:
            families[name].add_metric(labels, value)

        for key in sorted(set(self._predictions) | set(self._observations)):
            namespace, deployment = key
            labels = [namespace, deployment]
            predicted = self._predictions.get(key)
            observed = self._observations.get(key)
            if predicted is not None:
                add("kvcap_predicted_kv_cache_blocks", labels, predicted.num_gpu_blocks)
                add(
                    "kvcap_predicted_kv_cache_blocks_uncalibrated",
                    labels,
                    predicted.num_gpu_blocks_uncalibrated,
                )
                add("kvcap_predicted_kv_cache_tokens", labels, predicted.kv_cache_size_tokens)
                add("kvcap_predicted_max_concurrency", labels, predicted.max_concurrency)
                add("kvcap_deployment_replicas", labels, predicted.replicas)
                if predicted.recommended_replicas is not None:
                    add("kvcap_recommended_replicas", labels, predicted.recommended_replicas)
            if observed is None:
                continue
            self._observed(add, labels, observed)
            if predicted is None:
                continue
            if observed.num_gpu_blocks is not None and observed.num_gpu_blocks > 0:
                add(
                    "kvcap_prediction_error_ratio",
                    labels,
                    predicted.num_gpu_blocks / observed.num_gpu_blocks - 1,
                )
            capacity = predicted.concurrent_capacity * observed.replicas
            if observed.replicas >= 1 and capacity > 0:
                load = observed.requests_running + observed.requests_waiting
                add("kvcap_capacity_headroom_ratio", labels, 1 - load / capacity)

        if self._self.last_refresh_timestamp_seconds is not None:
            add("kvcap_last_refresh_timestamp_seconds", [], self._self.last_refresh_timestamp_seconds)
        if self._self.refresh_duration_seconds is not None:
            add("kvcap_refresh_duration_seconds", [], self._self.refresh_duration_seconds)
        add("kvcap_deployments_tracked", [], self._self.deployments_tracked)

        admission = self._admission.snapshot()
        for (verdict, kind), count in sorted(admission.reviews.items()):
            add("kvcap_admission_reviews_total", [verdict, kind], count)
        for reason, count in sorted(admission.unevaluated.items()):
            add("kvcap_admission_unevaluated_total", [reason], count)
        yield from families.values()
        spec = _SPECS["kvcap_admission_review_duration_seconds"]
        histogram = HistogramMetricFamily(spec.name, spec.help, labels=list(spec.labels))
        histogram.add_metric(
            [],
            buckets=[(_bound_text(bound), count) for bound, count in admission.buckets],
            sum_value=admission.sum_s,
        )
        yield histogram

    @staticmethod
    def _observed(add: _Add, labels: list[str], observed: DeploymentObservation) -> None:
        if observed.num_gpu_blocks is not None:
            add("kvcap_observed_kv_cache_blocks", labels, observed.num_gpu_blocks)
        if observed.kv_cache_usage_ratio is not None:
            add("kvcap_observed_kv_cache_usage_ratio", labels, observed.kv_cache_usage_ratio)
        add("kvcap_observed_requests_running", labels, observed.requests_running)
        add("kvcap_observed_requests_waiting", labels, observed.requests_waiting)
        add("kvcap_observed_preemptions_total", labels, observed.preemptions_total)
        add("kvcap_observed_replicas", labels, observed.replicas)
        add("kvcap_scrape_duration_seconds", labels, observed.duration_s)
        for pod in observed.pods:
            add("kvcap_target_up", [*labels, pod.target], 1.0 if pod.up else 0.0)
            if not pod.up or not pod.pod:
                continue
            if pod.num_gpu_blocks is not None:
                add("kvcap_observed_pod_kv_cache_blocks", [*labels, pod.pod], pod.num_gpu_blocks)
            if pod.kv_cache_usage_ratio is not None:
                add("kvcap_observed_pod_kv_cache_usage_ratio", [*labels, pod.pod], pod.kv_cache_usage_ratio)
        for reason, count in sorted(observed.errors_total.items()):
            add("kvcap_scrape_errors_total", [*labels, reason], count)


def render_metrics(
    predictions: Mapping[DeploymentKey, PredictedCapacity],
    observations: Mapping[DeploymentKey, DeploymentObservation],
    self_metrics: SelfMetrics | None = None,
    admission: AdmissionMetrics | None = None,
) -> bytes:
    """The text exposition of everything above, from a fresh registry (serve with ``CONTENT_TYPE``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KvcapCollector(predictions, observations, self_metrics, admission))
    return generate_latest(registry)
