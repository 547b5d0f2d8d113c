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

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service.exporter.names import METRICS, MetricName
from service.exporter.service_metrics import ServiceMetrics
from service.live.manager import DeploymentKey, DeploymentObservation

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
class PredictedLatency:
    """What the serving simulator predicts for one replica at the load and lengths the deployment shows."""

    ttft_seconds: float | None
    tpot_seconds: float | None
    step_time_scale: float | None = None
    """The deployment's fitted step-time multiplier (None when not fitted)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SelfMetrics:
    """The live refresher's own health (``kvcap_last_refresh_timestamp_seconds`` and friends)."""

    last_refresh_timestamp_seconds: float | None = None
    refresh_duration_seconds: float | None = None
    deployments_tracked: int = 0
    worker_restarts: int = 0
    """Times the live worker process died and was started again (always 0 with the worker thread)."""

    @classmethod
    def of(cls, manager: LiveState) -> SelfMetrics:
        return cls(
            last_refresh_timestamp_seconds=manager.last_refresh_timestamp_s,
            refresh_duration_seconds=manager.last_refresh_duration_s,
            deployments_tracked=manager.deployments_tracked,
            worker_restarts=getattr(manager, "worker_restarts", 0),
        )


class LiveState(Protocol):
    """What ``SelfMetrics`` reads: a ``LiveManager``, or the serving process's view of the worker process's."""

    @property
    def last_refresh_timestamp_s(self) -> float | None: ...

    @property
    def last_refresh_duration_s(self) -> float | None: ...

    @property
    def deployments_tracked(self) -> int: ...


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
    5.0,
    10.0,
)
"""Up to 10 s so that a p99 approaching the webhook's ``timeoutSeconds`` (at most 30 s, usually 5–10 s) is
visible before the API server starts timing reviews out."""

ADMISSION_ERROR_REASONS: Mapping[str, str] = {"malformed": "malformed", "error": "evaluation"}
"""Review verdicts that are kvcap failures, and the ``reason`` they are counted under in
``kvcap_admission_errors_total``: a body that is not an AdmissionReview, or a policy that raised."""


class AdmissionMetrics(Collector):
    """The admission webhook's counters and duration histogram, as prometheus-client metric objects.

    Each instance owns its metrics (``registry=None``: nothing lands on the global default registry), so tests
    get a clean instance instead of process-wide state; ``collect()`` yields them for whichever registry a
    scrape renders into.
    """

    def __init__(self, buckets: tuple[float, ...] = DEFAULT_ADMISSION_BUCKETS) -> None:
        self._reviews = Counter(
            "kvcap_admission_reviews",
            _SPECS["kvcap_admission_reviews_total"].help,
            list(_SPECS["kvcap_admission_reviews_total"].labels),
            registry=None,
        )
        self._errors = Counter(
            "kvcap_admission_errors",
            _SPECS["kvcap_admission_errors_total"].help,
            list(_SPECS["kvcap_admission_errors_total"].labels),
            registry=None,
        )
        self._duration = Histogram(
            "kvcap_admission_review_duration_seconds",
            _SPECS["kvcap_admission_review_duration_seconds"].help,
            registry=None,
            buckets=tuple(sorted(buckets)),
        )
        self._unevaluated = Counter(
            "kvcap_admission_unevaluated",
            _SPECS["kvcap_admission_unevaluated_total"].help,
            list(_SPECS["kvcap_admission_unevaluated_total"].labels),
            registry=None,
        )

    def observe(self, *, verdict: str, kind: str, duration_seconds: float) -> None:
        """Count one answered review (``verdict``: allowed | denied | warned | error …, ``kind``: object kind)."""
        self._reviews.labels(verdict=verdict, kind=kind).inc()
        reason = ADMISSION_ERROR_REASONS.get(verdict)
        if reason is not None:
            self._errors.labels(reason=reason).inc()
        self._duration.observe(duration_seconds)

    def observe_unevaluated(self, *, reason: str) -> None:
        """Count one part of a review that kvcap could not evaluate (it was answered with a warning)."""
        self._unevaluated.labels(reason=reason).inc()

    def unevaluated_counts(self) -> dict[str, float]:
        """``kvcap_admission_unevaluated_total`` by reason, as counted so far."""
        return {
            sample.labels["reason"]: sample.value
            for family in self._unevaluated.collect()
            for sample in family.samples
            if sample.name.endswith("_total")
        }

    def collect(self) -> Iterator[Metric]:
        yield from self._reviews.collect()
        yield from self._errors.collect()
        yield from self._unevaluated.collect()
        yield from self._duration.collect()


admission_metrics = AdmissionMetrics()
"""The process-wide instance the admission webhook increments and ``/metrics`` reads."""


def _family(spec: MetricName) -> GaugeMetricFamily | CounterMetricFamily:
    if spec.kind == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=list(spec.labels))
    return GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))


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
        kvcap_observed_spec_acceptance_length{namespace="llm",deployment="chat"} 2.6   (speculative decoding:
            1 + accepted ÷ drafts since the previous refresh, over pods)
        kvcap_target_up{namespace="llm",deployment="chat",target="http://10.0.0.5:8000/metrics"} 1.0
        kvcap_scrape_duration_seconds{namespace="llm",deployment="chat"} 0.012
        kvcap_scrape_errors_total{namespace="llm",deployment="chat",reason="timeout"} 2.0

    latency, from vLLM's histograms since the previous refresh and the serving simulator at that load::

        kvcap_observed_ttft_seconds{namespace="llm",deployment="chat",stat="p99"} 0.35   (stat: mean, p50, p99)
        kvcap_observed_tpot_seconds{namespace="llm",deployment="chat",stat="mean"} 0.021
        kvcap_observed_request_rate{namespace="llm",deployment="chat"} 4.2
        kvcap_predicted_ttft_seconds{namespace="llm",deployment="chat"} 0.12
        kvcap_predicted_tpot_seconds{namespace="llm",deployment="chat"} 0.019
        kvcap_latency_drift_ratio{namespace="llm",deployment="chat",latency="tpot"} 0.105
            observed mean / predicted mean − 1; only when both exist and the prediction is > 0
        kvcap_step_time_scale{namespace="llm",deployment="chat"} 1.1

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
        latency: Mapping[DeploymentKey, PredictedLatency] | None = None,
    ) -> None:
        self._predictions = predictions
        self._latency = latency or {}
        self._observations = observations
        self._self = self_metrics or SelfMetrics(deployments_tracked=len(observations))
        self._admission = admission if admission is not None else admission_metrics

    def collect(self) -> Iterator[Metric]:
        families = {spec.name: _family(spec) for spec in METRICS if spec.collector == "snapshot"}

        def add(name: str, labels: list[str], value: float) -> None:
            families[name].add_metric(labels, value)

        for key in sorted(set(self._predictions) | set(self._observations) | set(self._latency)):
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
            self._latency_series(add, labels, observed, self._latency.get(key))
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
        add("kvcap_live_worker_restarts_total", [], self._self.worker_restarts)

        yield from families.values()
        yield from self._admission.collect()

    @staticmethod
    def _latency_series(
        add: _Add,
        labels: list[str],
        observed: DeploymentObservation | None,
        predicted: PredictedLatency | None,
    ) -> None:
        latency = observed.latency if observed is not None else None
        means: dict[str, float | None] = {"ttft": None, "tpot": None}
        if latency is not None:
            for name, distribution in (("ttft", latency.ttft), ("tpot", latency.tpot)):
                if distribution is None:
                    continue
                means[name] = distribution.mean
                for stat in ("mean", "p50", "p99"):
                    value = getattr(distribution, stat)
                    if value is not None:
                        add(f"kvcap_observed_{name}_seconds", [*labels, stat], value)
            if latency.request_rate is not None:
                add("kvcap_observed_request_rate", labels, latency.request_rate)
        if predicted is None:
            return
        if predicted.step_time_scale is not None:
            add("kvcap_step_time_scale", labels, predicted.step_time_scale)
        for name, value in (("ttft", predicted.ttft_seconds), ("tpot", predicted.tpot_seconds)):
            if value is None:
                continue
            add(f"kvcap_predicted_{name}_seconds", labels, value)
            mean = means[name]
            if mean is not None and value > 0:
                add("kvcap_latency_drift_ratio", [*labels, name], mean / value - 1)

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
        if observed.spec_mean_acceptance_length is not None:
            add("kvcap_observed_spec_acceptance_length", labels, observed.spec_mean_acceptance_length)
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
    service: ServiceMetrics | None = None,
    latency: Mapping[DeploymentKey, PredictedLatency] | None = None,
) -> bytes:
    """The text exposition of everything above, from a fresh registry (serve with ``CONTENT_TYPE``); with
    ``service``, kvcap's own HTTP, TLS, catalog, build and process metrics too."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KvcapCollector(predictions, observations, self_metrics, admission, latency))
    if service is not None:
        registry.register(service)
    return generate_latest(registry)
