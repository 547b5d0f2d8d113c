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
        "kvcap_admission_reviews_total",
        "counter",
        "Admission reviews answered, by verdict",
        ("verdict", "kind"),
    ),
    MetricName(
        "kvcap_admission_review_duration_seconds", "histogram", "Time to answer one admission review", ()
    ),
    MetricName(
        "kvcap_admission_unevaluated_total",
        "counter",
        "Parts of admitted objects kvcap could not evaluate (each also a warning on the review), by reason",
        ("reason",),
    ),
)

METRIC_NAMES: frozenset[str] = frozenset(m.name for m in METRICS)
