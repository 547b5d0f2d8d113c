"""The kvcap Collector: every metric in names.py, derived ratios, per-pod and per-target series, and an
exposition prometheus-client's own parser reads back."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from service.exporter.collector import (
    AdmissionMetrics,
    KvcapCollector,
    PredictedCapacity,
    PredictedLatency,
    SelfMetrics,
    render_metrics,
)
from service.exporter.names import METRICS
from service.exporter.service_metrics import ServiceMetrics
from service.live.manager import DeploymentObservation, LiveTarget, aggregate
from service.live.parser import parse_vllm_metrics
from service.live.schemas import parse_live_source
from service.live.scraper import TargetResult

KEY = ("llm", "chat")
URL_A = "http://a:8000/metrics"
LABELS = {"namespace": "llm", "deployment": "chat"}


@pytest.fixture(scope="module")
def busy_text(vllm_metrics_dir: Path) -> str:
    return (vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_text()


def result(url: str, text: str | None, *, reason: str | None = None) -> TargetResult:
    metrics = parse_vllm_metrics(text) if text is not None else None
    return TargetResult(
        url=url,
        ok=metrics is not None,
        reason=None if metrics is not None else reason,  # type: ignore[arg-type]
        duration_s=0.01,
        metrics=metrics,
        pod=url.split("//")[1].split("/")[0],
    )


def observe(results: list[TargetResult], errors: dict[str, int] | None = None) -> DeploymentObservation:
    urls = [r.url for r in results]
    target = LiveTarget(namespace="llm", name="chat", source=parse_live_source({"scrape_urls": urls}))
    return aggregate(target, results, observed_at_s=1_767_225_600.0, duration_s=0.05, errors_total=errors)


def prediction(**overrides: object) -> PredictedCapacity:
    values: dict[str, object] = {
        "num_gpu_blocks": 9000,
        "num_gpu_blocks_uncalibrated": 9500,
        "kv_cache_size_tokens": 1_152_000,
        "max_concurrency": 562.5,
        "max_num_seqs": 256,
        "recommended_replicas": 3,
        "replicas": 2,
    }
    values.update(overrides)
    return PredictedCapacity(**values)  # type: ignore[arg-type]


def registry_for(collector: KvcapCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def test_predictions_and_observations_become_labelled_gauges(busy_text: str) -> None:
    odd = busy_text.replace('num_gpu_blocks="8192"', 'num_gpu_blocks="4096"')
    observation = observe(
        [
            result("http://a:8000/metrics", busy_text),
            result("http://b:8000/metrics", odd),
            result("http://c:8000/metrics", busy_text),
        ],
        errors={"timeout": 2},
    )
    registry = registry_for(
        KvcapCollector({KEY: prediction()}, {KEY: observation}, admission=AdmissionMetrics())
    )

    def value(name: str, **extra: str) -> float | None:
        return registry.get_sample_value(name, {**LABELS, **extra})

    assert value("kvcap_predicted_kv_cache_blocks") == 9000
    assert value("kvcap_predicted_kv_cache_blocks_uncalibrated") == 9500
    assert value("kvcap_predicted_kv_cache_tokens") == 1_152_000
    assert value("kvcap_predicted_max_concurrency") == 562.5
    assert value("kvcap_recommended_replicas") == 3
    assert value("kvcap_deployment_replicas") == 2
    assert value("kvcap_observed_kv_cache_blocks") == 8192
    assert value("kvcap_observed_pod_kv_cache_blocks", pod="b:8000") == 4096
    assert value("kvcap_observed_pod_kv_cache_blocks", pod="a:8000") == 8192
    assert value("kvcap_observed_kv_cache_usage_ratio") == pytest.approx(0.009766817238432424)
    assert value("kvcap_observed_pod_kv_cache_usage_ratio", pod="c:8000") == pytest.approx(
        0.009766817238432424
    )
    assert value("kvcap_observed_requests_running") == 24
    assert value("kvcap_observed_requests_waiting") == 0
    assert value("kvcap_observed_preemptions_total") == 0
    assert value("kvcap_observed_replicas") == 3
    assert value("kvcap_target_up", target="http://a:8000/metrics") == 1
    assert value("kvcap_scrape_duration_seconds") == 0.05
    assert value("kvcap_scrape_errors_total", reason="timeout") == 2
    assert value("kvcap_prediction_error_ratio") == pytest.approx(9000 / 8192 - 1)
    # 24 requests against min(562.5, 256) × 3 replicas.
    assert value("kvcap_capacity_headroom_ratio") == pytest.approx(1 - 24 / (256 * 3))


def test_headroom_uses_the_kv_cache_limit_when_it_is_below_max_num_seqs(busy_text: str) -> None:
    observation = observe([result("http://a:8000/metrics", busy_text)])
    registry = registry_for(
        KvcapCollector(
            {KEY: prediction(max_concurrency=10.0)}, {KEY: observation}, admission=AdmissionMetrics()
        )
    )
    assert registry.get_sample_value("kvcap_capacity_headroom_ratio", LABELS) == pytest.approx(1 - 8 / 10)


def test_derived_ratios_are_omitted_without_observed_blocks_or_replicas() -> None:
    observation = observe([result("http://a:8000/metrics", None, reason="timeout")])
    registry = registry_for(
        KvcapCollector({KEY: prediction()}, {KEY: observation}, admission=AdmissionMetrics())
    )
    assert registry.get_sample_value("kvcap_prediction_error_ratio", LABELS) is None
    assert registry.get_sample_value("kvcap_capacity_headroom_ratio", LABELS) is None
    assert registry.get_sample_value("kvcap_observed_kv_cache_blocks", LABELS) is None
    assert registry.get_sample_value("kvcap_observed_replicas", LABELS) == 0
    assert registry.get_sample_value("kvcap_target_up", {**LABELS, "target": "http://a:8000/metrics"}) == 0
    assert registry.get_sample_value("kvcap_predicted_kv_cache_blocks", LABELS) == 9000


def test_a_deployment_without_prediction_still_exports_what_was_observed(busy_text: str) -> None:
    observation = observe([result("http://a:8000/metrics", busy_text)])
    registry = registry_for(KvcapCollector({}, {KEY: observation}, admission=AdmissionMetrics()))
    assert registry.get_sample_value("kvcap_observed_kv_cache_blocks", LABELS) == 8192
    assert registry.get_sample_value("kvcap_prediction_error_ratio", LABELS) is None
    assert registry.get_sample_value("kvcap_predicted_kv_cache_blocks", LABELS) is None


def test_no_recommendation_means_no_recommended_replicas_series() -> None:
    registry = registry_for(
        KvcapCollector({KEY: prediction(recommended_replicas=None)}, {}, admission=AdmissionMetrics())
    )
    assert registry.get_sample_value("kvcap_recommended_replicas", LABELS) is None
    assert registry.get_sample_value("kvcap_deployment_replicas", LABELS) == 2


def test_self_metrics_and_admission_counters_are_exported() -> None:
    admission = AdmissionMetrics()
    admission.observe(verdict="allowed", kind="Deployment", duration_seconds=0.003)
    admission.observe(verdict="denied", kind="Deployment", duration_seconds=0.02)
    admission.observe(verdict="denied", kind="Deployment", duration_seconds=30.0)
    self_metrics = SelfMetrics(
        last_refresh_timestamp_seconds=1_767_225_600.0, refresh_duration_seconds=0.8, deployments_tracked=7
    )
    registry = registry_for(KvcapCollector({}, {}, self_metrics, admission))
    get = registry.get_sample_value
    assert get("kvcap_last_refresh_timestamp_seconds") == 1_767_225_600.0
    assert get("kvcap_refresh_duration_seconds") == 0.8
    assert get("kvcap_deployments_tracked") == 7
    assert get("kvcap_admission_reviews_total", {"verdict": "denied", "kind": "Deployment"}) == 2
    assert get("kvcap_admission_reviews_total", {"verdict": "allowed", "kind": "Deployment"}) == 1
    assert get("kvcap_admission_review_duration_seconds_bucket", {"le": "0.005"}) == 1
    assert get("kvcap_admission_review_duration_seconds_bucket", {"le": "0.025"}) == 2
    assert get("kvcap_admission_review_duration_seconds_bucket", {"le": "+Inf"}) == 3
    assert get("kvcap_admission_review_duration_seconds_count") == 3
    assert get("kvcap_admission_review_duration_seconds_sum") == pytest.approx(30.023)


def test_rendered_text_parses_back_and_declares_every_metric_in_names(busy_text: str) -> None:
    observation = observe([result("http://a:8000/metrics", busy_text)], errors={"parse": 1})
    admission = AdmissionMetrics()
    admission.observe(verdict="malformed", kind="", duration_seconds=0.001)
    service = ServiceMetrics()
    service.observe_request(method="GET", route="/healthz", status=200, duration_seconds=0.001)
    service.catalog_refreshed(1_767_225_600.0)
    service.certificate_loaded(expiry_timestamp_seconds=1_800_000_000.0, reload=True)
    service.certificate_reload_failed()
    body = render_metrics({KEY: prediction()}, {KEY: observation}, SelfMetrics(), admission, service)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    for spec in METRICS:
        family_name = spec.name.removesuffix("_total") if spec.kind == "counter" else spec.name
        assert family_name in families, spec.name
        assert families[family_name].type == spec.kind, spec.name
        for sample in families[family_name].samples:
            expected = set(spec.labels) | ({"le"} if sample.name.endswith("_bucket") else set())
            assert set(sample.labels) == expected, (spec.name, sample.labels)
    blocks = families["kvcap_observed_kv_cache_blocks"].samples
    assert [(s.labels, s.value) for s in blocks] == [(LABELS, 8192.0)]


def test_a_deployment_that_leaves_the_snapshot_stops_being_exported(busy_text: str) -> None:
    observation = observe([result("http://a:8000/metrics", busy_text)])
    first = render_metrics({}, {KEY: observation}, admission=AdmissionMetrics())
    second = render_metrics({}, {}, admission=AdmissionMetrics())
    assert b'deployment="chat"' in first
    assert b'deployment="chat"' not in second


def samples_of(body: bytes, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    return {tuple(sorted(s.labels.items())): s.value for s in families[name].samples}


def test_observed_latency_comes_from_vllms_histograms_with_mean_median_and_p99(busy_text: str) -> None:
    observation = observe([result("http://a:8000/metrics", busy_text)])
    body = render_metrics({}, {KEY: observation}, admission=AdmissionMetrics())
    ttft = samples_of(body, "kvcap_observed_ttft_seconds")
    # The busy exposition: 21 first tokens, sum 0.3238 s; 3 ≤ 10 ms, 16 ≤ 20 ms, 21 ≤ 40 ms.
    assert {tuple(k for k in labels if k[0] != "stat") for labels in ttft} == {tuple(sorted(LABELS.items()))}
    by_stat = {dict(labels)["stat"]: value for labels, value in ttft.items()}
    assert by_stat["mean"] == pytest.approx(0.32380056381225586 / 21)
    assert by_stat["p50"] == pytest.approx(0.01 + 0.01 * 7.5 / 13)
    assert by_stat["p99"] == pytest.approx(0.02 + 0.02 * 4.79 / 5)
    tpot = {
        dict(labels)["stat"]: value
        for labels, value in samples_of(body, "kvcap_observed_tpot_seconds").items()
    }
    assert tpot["mean"] == pytest.approx(0.029591769579026702 / 13)  # vLLM's per-request TPOT histogram
    assert samples_of(body, "kvcap_latency_drift_ratio") == {}  # nothing predicted


def test_drift_is_observed_over_predicted_mean_minus_one_per_latency(busy_text: str) -> None:
    observation = observe([result("http://a:8000/metrics", busy_text)])
    predicted = PredictedLatency(ttft_seconds=0.01, tpot_seconds=0.002, step_time_scale=1.25)
    body = render_metrics({}, {KEY: observation}, admission=AdmissionMetrics(), latency={KEY: predicted})
    drift = {
        dict(labels)["latency"]: value
        for labels, value in samples_of(body, "kvcap_latency_drift_ratio").items()
    }
    assert drift["ttft"] == pytest.approx(0.32380056381225586 / 21 / 0.01 - 1)
    assert drift["tpot"] == pytest.approx(0.029591769579026702 / 13 / 0.002 - 1)
    assert list(samples_of(body, "kvcap_predicted_tpot_seconds").values()) == [0.002]
    assert list(samples_of(body, "kvcap_step_time_scale").values()) == [1.25]


def test_a_prediction_without_observed_latency_exports_no_drift() -> None:
    predicted = PredictedLatency(ttft_seconds=0.01, tpot_seconds=0.002)
    body = render_metrics({}, {}, admission=AdmissionMetrics(), latency={KEY: predicted})
    assert samples_of(body, "kvcap_latency_drift_ratio") == {}
    assert list(samples_of(body, "kvcap_predicted_ttft_seconds").values()) == [0.01]


def test_observed_acceptance_length_is_one_plus_accepted_over_drafts_in_the_window(
    vllm_metrics_dir: Path,
) -> None:
    start = (vllm_metrics_dir / "vllm-0.32.0-cpu-ngram-start.txt").read_text()
    served = (vllm_metrics_dir / "vllm-0.32.0-cpu-ngram.txt").read_text()
    target = LiveTarget(namespace="llm", name="chat", source=parse_live_source({"scrape_urls": [URL_A]}))
    first = aggregate(target, [result(URL_A, start)], observed_at_s=1000.0, duration_s=0.05)
    assert first.spec_mean_acceptance_length is None  # no drafts yet: nothing to report
    second = aggregate(target, [result(URL_A, served)], observed_at_s=1015.0, duration_s=0.05, previous=first)
    assert second.spec_mean_acceptance_length == pytest.approx(1 + 276 / 96)
    body = render_metrics({}, {KEY: second}, admission=AdmissionMetrics())
    assert samples_of(body, "kvcap_observed_spec_acceptance_length") == {
        tuple(sorted(LABELS.items())): pytest.approx(1 + 276 / 96)
    }
    idle = aggregate(target, [result(URL_A, served)], observed_at_s=1030.0, duration_s=0.05, previous=second)
    assert idle.spec_mean_acceptance_length is None  # no new drafts in that window
    # The counters went back (a restart, then 10 drafts and 15 accepted tokens): since the pod started, not a
    # negative window.
    after_restart = served.replace(
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="/tmp/ngram/model"} 96.0',
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="/tmp/ngram/model"} 10.0',
    ).replace(
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="/tmp/ngram/model"} 276.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="/tmp/ngram/model"} 15.0',
    )
    assert after_restart.count(" 10.0\n") >= 1 and after_restart != served
    restarted = aggregate(
        target, [result(URL_A, after_restart)], observed_at_s=1045.0, duration_s=0.05, previous=second
    )
    assert restarted.spec_mean_acceptance_length == pytest.approx(2.5)
    busy = observe([result(URL_A, (vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_text())])
    assert busy.spec_mean_acceptance_length is None
    assert (
        samples_of(
            render_metrics({}, {KEY: busy}, admission=AdmissionMetrics()),
            "kvcap_observed_spec_acceptance_length",
        )
        == {}
    )
