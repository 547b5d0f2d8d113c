"""Every metric kvcap exports: names, types, help texts and labels, in one place.

Dashboards, alert rules and tests read this table, so a renamed metric cannot silently break a panel. Names
follow Prometheus conventions: ``kvcap_`` prefix, base units, ratios in 0–1, counters ending in ``_total``.
"""

from __future__ import annotations

from dataclasses import dataclass

DEPLOYMENT_LABELS = ("namespace", "deployment")


@dataclass(frozen=True, slots=True)
class MetricName:
    name: str
    kind: str  # gauge | counter | histogram
    help: str
    labels: tuple[str, ...] = DEPLOYMENT_LABELS
    collector: str = "snapshot"
    """Who yields it: ``snapshot`` (``KvcapCollector``, per scrape), ``admission`` (``AdmissionMetrics``) or
    ``service`` (``ServiceMetrics``: the process's own HTTP, TLS, catalog and build metrics)."""


METRICS: tuple[MetricName, ...] = (
    MetricName(
        "kvcap_predicted_kv_cache_blocks",
        "gauge",
        "KV-cache blocks kvcap predicts one replica allocates (num_gpu_blocks, calibrated when a calibration exists)",
    ),
    MetricName(
        "kvcap_predicted_kv_cache_blocks_uncalibrated",
        "gauge",
        "KV-cache blocks predicted from the model alone, before calibration",
    ),
    MetricName(
        "kvcap_predicted_kv_cache_tokens",
        "gauge",
        "KV-cache capacity in tokens kvcap predicts for one replica",
    ),
    MetricName(
        "kvcap_predicted_max_concurrency",
        "gauge",
        "Requests of max_model_len tokens one replica can hold at once (vLLM's maximum concurrency)",
    ),
    MetricName(
        "kvcap_observed_kv_cache_blocks",
        "gauge",
        "num_gpu_blocks reported by vLLM, median over the deployment's replicas",
    ),
    MetricName(
        "kvcap_observed_pod_kv_cache_blocks",
        "gauge",
        "num_gpu_blocks reported by one vLLM replica",
        (*DEPLOYMENT_LABELS, "pod"),
    ),
    MetricName(
        "kvcap_observed_kv_cache_usage_ratio", "gauge", "vLLM KV-cache usage (0-1), mean over replicas"
    ),
    MetricName(
        "kvcap_observed_pod_kv_cache_usage_ratio",
        "gauge",
        "vLLM KV-cache usage (0-1) of one replica",
        (*DEPLOYMENT_LABELS, "pod"),
    ),
    MetricName("kvcap_observed_requests_running", "gauge", "Requests running, summed over replicas"),
    MetricName("kvcap_observed_requests_waiting", "gauge", "Requests waiting, summed over replicas"),
    MetricName(
        "kvcap_observed_preemptions_total", "counter", "Preemptions reported by vLLM, summed over replicas"
    ),
    MetricName("kvcap_observed_replicas", "gauge", "Replicas whose metrics were read in the last refresh"),
    MetricName(
        "kvcap_prediction_error_ratio", "gauge", "predicted / observed KV-cache blocks - 1 (0 = exact)"
    ),
    MetricName(
        "kvcap_capacity_headroom_ratio",
        "gauge",
        "1 - (running + waiting requests) / (predicted concurrent capacity of the observed replicas)",
    ),
    MetricName(
        "kvcap_recommended_replicas", "gauge", "Replicas kvcap recommends for the registered workload"
    ),
    MetricName("kvcap_deployment_replicas", "gauge", "Replicas registered for the deployment"),
    MetricName(
        "kvcap_target_up",
        "gauge",
        "1 when the last read of a metrics target succeeded",
        (*DEPLOYMENT_LABELS, "target"),
    ),
    MetricName(
        "kvcap_scrape_duration_seconds",
        "gauge",
        "Time the last refresh of one deployment's live metrics took",
    ),
    MetricName(
        "kvcap_scrape_errors_total",
        "counter",
        "Failed reads of live metrics, by reason",
        (*DEPLOYMENT_LABELS, "reason"),
    ),
    MetricName(
        "kvcap_last_refresh_timestamp_seconds",
        "gauge",
        "Unix time of the last completed refresh of live metrics",
        (),
    ),
    MetricName(
        "kvcap_refresh_duration_seconds", "gauge", "Time the last full refresh of live metrics took", ()
    ),
    MetricName(
        "kvcap_deployments_tracked",
        "gauge",
        "Deployments whose live metrics this kvcap replica refreshes",
        (),
    ),
    MetricName(
        "kvcap_live_worker_restarts_total",
        "counter",
        "Times the live-metrics worker process died and was started again",
        (),
    ),
    MetricName(
        "kvcap_observed_spec_acceptance_length",
        "gauge",
        "Speculative decoding's mean acceptance length vLLM reports since the previous refresh "
        "(1 + accepted tokens / drafts), over replicas",
    ),
    MetricName(
        "kvcap_observed_ttft_seconds",
        "gauge",
        "Time to first token vLLM reports since the previous refresh (stat: mean, p50, p99), over replicas",
        (*DEPLOYMENT_LABELS, "stat"),
    ),
    MetricName(
        "kvcap_observed_tpot_seconds",
        "gauge",
        "Time per output token vLLM reports since the previous refresh (stat: mean, p50, p99), over replicas",
        (*DEPLOYMENT_LABELS, "stat"),
    ),
    MetricName(
        "kvcap_observed_request_rate",
        "gauge",
        "Requests per second the deployment finished since the previous refresh, summed over replicas",
    ),
    MetricName(
        "kvcap_predicted_ttft_seconds",
        "gauge",
        "Mean time to first token the serving simulator predicts at the observed load and lengths",
    ),
    MetricName(
        "kvcap_predicted_tpot_seconds",
        "gauge",
        "Mean time per output token the serving simulator predicts at the observed load and lengths",
    ),
    MetricName(
        "kvcap_latency_drift_ratio",
        "gauge",
        "Observed / predicted mean latency - 1 (latency: ttft, tpot); 0 = the simulator matches the fleet",
        (*DEPLOYMENT_LABELS, "latency"),
    ),
    MetricName(
        "kvcap_step_time_scale",
        "gauge",
        "Step-time multiplier fitted from this deployment's observed time per output token (1 = uncalibrated)",
    ),
    MetricName(
        "kvcap_admission_reviews_total",
        "counter",
        "Admission reviews answered, by verdict",
        ("verdict", "kind"),
        "admission",
    ),
    MetricName(
        "kvcap_admission_errors_total",
        "counter",
        "Admission reviews kvcap could not evaluate: malformed AdmissionReview bodies or a policy that failed",
        ("reason",),
        "admission",
    ),
    MetricName(
        "kvcap_admission_review_duration_seconds",
        "histogram",
        "Time to answer one admission review",
        (),
        "admission",
    ),
    MetricName(
        "kvcap_build_info",
        "gauge",
        "Always 1: the kvcap version, source revision and Python version of this process",
        ("version", "revision", "python_version"),
        "service",
    ),
    MetricName(
        "kvcap_http_requests_total",
        "counter",
        "HTTP requests answered, by method, route template and status code",
        ("method", "route", "status"),
        "service",
    ),
    MetricName(
        "kvcap_http_request_duration_seconds",
        "histogram",
        "Time to answer one HTTP request, by method, route template and status code",
        ("method", "route", "status"),
        "service",
    ),
    MetricName(
        "kvcap_catalog_refresh_timestamp_seconds",
        "gauge",
        "Unix time of the last successful refresh of the in-memory catalog from the database",
        (),
        "service",
    ),
    MetricName(
        "kvcap_tls_certificate_expiry_timestamp_seconds",
        "gauge",
        "Unix time at which the TLS certificate being served expires (its notAfter)",
        (),
        "service",
    ),
    MetricName(
        "kvcap_tls_certificate_reloads_total",
        "counter",
        "Re-reads of the TLS certificate and key after their files changed, by result",
        ("result",),
        "service",
    ),
    MetricName(
        "kvcap_admission_unevaluated_total",
        "counter",
        "Parts of admitted objects kvcap could not evaluate (each also a warning on the review), by reason",
        ("reason",),
        "admission",
    ),
)

LIBRARY_COLLECTORS: tuple[str, ...] = ("process_", "python_info", "python_gc_")
"""Prefixes of the series prometheus-client's ProcessCollector, PlatformCollector and GCCollector add (CPU
seconds, resident memory, open file descriptors, start time; the Python version; garbage collections)."""

METRIC_NAMES: frozenset[str] = frozenset(m.name for m in METRICS)
