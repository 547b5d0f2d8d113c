"""The Prometheus source: instant queries answered in the real HTTP API format, regrouped per pod."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.live.guard import TargetGuard
from service.live.histograms import TTFT
from service.live.prometheus import histograms_query, query_prometheus, samples_query
from service.live.schemas import PrometheusQuery

MATCH = '{namespace="llm",app="vllm"}'
SOURCE = PrometheusQuery(url="http://prometheus.monitoring:9090/", match=MATCH)
TS = 1_767_225_600.123


def series(name: str, pod: str, value: str, **labels: str) -> dict[str, Any]:
    metric = {
        "__name__": name,
        "namespace": "llm",
        "pod": pod,
        "instance": f"{pod}:8000",
        "job": "vllm",
        **labels,
    }
    return {"metric": metric, "value": [TS, value]}


def vector(result: list[dict[str, Any]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def cache_config(pod: str, blocks: str) -> dict[str, Any]:
    return series(
        "vllm:cache_config_info",
        pod,
        "1",
        engine="0",
        block_size="16",
        num_gpu_blocks=blocks,
        gpu_memory_utilization="0.9",
        kv_cache_memory_bytes="None",
    )


FLEET: dict[str, list[dict[str, Any]]] = {
    "vllm:cache_config_info": [cache_config("chat-0", "28160"), cache_config("chat-1", "28160")],
    "vllm:kv_cache_usage_perc": [
        series("vllm:kv_cache_usage_perc", "chat-0", "0.25", engine="0", model_name="llama"),
        series("vllm:kv_cache_usage_perc", "chat-1", "0.75", engine="0", model_name="llama"),
    ],
    "vllm:num_requests_running": [
        series("vllm:num_requests_running", "chat-0", "3", engine="0", model_name="llama"),
        series("vllm:num_requests_running", "chat-1", "5", engine="0", model_name="llama"),
    ],
    "vllm:num_requests_waiting": [
        series("vllm:num_requests_waiting", "chat-0", "0", engine="0", model_name="llama"),
        series("vllm:num_requests_waiting", "chat-1", "2", engine="0", model_name="llama"),
    ],
    "vllm:num_preemptions_total": [
        series("vllm:num_preemptions_total", "chat-0", "1", engine="0", model_name="llama"),
    ],
    # chat-0 decodes speculatively, chat-1 does not (no series)
    "vllm:spec_decode_num_drafts_total": [
        series("vllm:spec_decode_num_drafts_total", "chat-0", "40", engine="0", model_name="llama"),
    ],
    "vllm:spec_decode_num_accepted_tokens_total": [
        series("vllm:spec_decode_num_accepted_tokens_total", "chat-0", "64", engine="0", model_name="llama"),
    ],
    "up": [
        series("up", "chat-0", "1"),
        series("up", "chat-1", "1"),
        series("up", "chat-2", "0"),
    ],
}


def prometheus(answers: dict[str, list[dict[str, Any]]], queries: list[str] | None = None):  # type: ignore[no-untyped-def]
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/query"
        query = request.url.params["query"]
        if queries is not None:
            queries.append(query)
        if query == histograms_query(MATCH):  # the one query for every histogram series
            return httpx.Response(200, json=vector(answers.get("histograms", [])))
        if query.startswith('{__name__=~"'):  # the one query for the gauges and counters, by a name regex
            assert query == samples_query(MATCH)
            names = query[len('{__name__=~"') :].split('"', 1)[0].split("|")
            return httpx.Response(200, json=vector([s for name in names for s in answers.get(name, [])]))
        name, _, selector = query.partition("{")
        assert "{" + selector == MATCH
        return httpx.Response(200, json=vector(answers.get(name, [])))

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_groups_series_by_pod_into_the_same_results_a_scrape_gives() -> None:
    queries: list[str] = []
    async with prometheus(FLEET, queries) as client:
        results = await query_prometheus(client, SOURCE, guard=None, timeout_s=5, max_bytes=1 << 20)
    # Three queries for a source, whatever it holds: the gauges and counters, the histograms, ``up``.
    assert sorted(queries) == sorted([samples_query(MATCH), histograms_query(MATCH), f"up{MATCH}"])
    by_pod = {r.pod: r for r in results}
    assert set(by_pod) == {"chat-0", "chat-1", "chat-2"}
    chat0 = by_pod["chat-0"].metrics
    assert chat0 is not None
    assert chat0.num_gpu_blocks == 28160
    assert chat0.kv_cache_usage_ratio == 0.25
    assert (chat0.spec_drafts_total, chat0.spec_accepted_tokens_total) == (40.0, 64.0)
    chat1 = by_pod["chat-1"].metrics
    assert chat1 is not None and chat1.spec_drafts_total is None and chat1.spec_accepted_tokens_total is None
    assert chat0.requests_running == 3
    assert chat0.preemptions_total == 1
    chat1 = by_pod["chat-1"].metrics
    assert chat1 is not None
    assert (chat1.requests_running, chat1.requests_waiting, chat1.kv_cache_usage_ratio) == (5, 2, 0.75)
    assert by_pod["chat-0"].target == "chat-0"
    assert by_pod["chat-0"].url == "http://prometheus.monitoring:9090"


async def test_cache_config_keeps_vllm_labels_and_drops_prometheus_target_labels() -> None:
    async with prometheus(FLEET) as client:
        results = await query_prometheus(client, SOURCE, guard=None, timeout_s=5, max_bytes=1 << 20)
    metrics = next(r.metrics for r in results if r.pod == "chat-0")
    assert metrics is not None and metrics.cache_config is not None
    assert dict(metrics.cache_config.labels) == {
        "block_size": "16",
        "num_gpu_blocks": "28160",
        "gpu_memory_utilization": "0.9",
        "kv_cache_memory_bytes": "None",
    }


async def test_a_pod_prometheus_cannot_scrape_is_reported_down() -> None:
    async with prometheus(FLEET) as client:
        results = await query_prometheus(client, SOURCE, guard=None, timeout_s=5, max_bytes=1 << 20)
    down = next(r for r in results if r.pod == "chat-2")
    assert (down.ok, down.reason, down.metrics) == (False, "down", None)


async def test_falls_back_to_the_pre_0_11_usage_name() -> None:
    old_fleet = {
        "vllm:gpu_cache_usage_perc": [series("vllm:gpu_cache_usage_perc", "old-0", "0.5", model_name="m")],
        "vllm:num_requests_running": [series("vllm:num_requests_running", "old-0", "1", model_name="m")],
    }
    queries: list[str] = []
    async with prometheus(old_fleet, queries) as client:
        (result,) = await query_prometheus(client, SOURCE, guard=None, timeout_s=5, max_bytes=1 << 20)
    assert "vllm:gpu_cache_usage_perc" in samples_query(MATCH)  # asked for in the same query as the new name
    assert len(queries) == 3
    assert result.metrics is not None
    assert result.metrics.kv_cache_usage_ratio == 0.5


async def test_groups_by_instance_when_series_have_no_pod_label() -> None:
    answer = {
        "metric": {"__name__": "vllm:num_requests_running", "instance": "10.0.0.5:8000"},
        "value": [TS, "4"],
    }
    async with prometheus({"vllm:num_requests_running": [answer]}) as client:
        (result,) = await query_prometheus(client, SOURCE, guard=None, timeout_s=5, max_bytes=1 << 20)
    assert result.pod == "10.0.0.5:8000"


async def test_a_selector_matching_nothing_gives_no_targets() -> None:
    async with prometheus({}) as client:
        assert await query_prometheus(client, SOURCE, guard=None, timeout_s=5, max_bytes=1 << 20) == []


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (
            httpx.Response(400, json={"status": "error", "errorType": "bad_data", "error": "parse error"}),
            "http_status",
        ),
        (
            httpx.Response(200, json={"status": "error", "errorType": "timeout", "error": "query timed out"}),
            "parse",
        ),
        (
            httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": []}}),
            "parse",
        ),
        (httpx.Response(200, text="<html>Grafana login</html>"), "parse"),
        (httpx.Response(302, headers={"Location": "http://169.254.169.254/"}), "redirect"),
        (httpx.Response(200, content=b"[" * (2 << 20)), "body_too_large"),
    ],
    ids=["400", "error-status", "matrix", "html", "redirect", "too-large"],
)
async def test_a_failing_server_is_one_failed_result_naming_it(response: httpx.Response, reason: str) -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: response)) as client:
        (result,) = await query_prometheus(client, SOURCE, guard=None, timeout_s=5, max_bytes=1 << 20)
    assert (result.ok, result.reason) == (False, reason)
    assert result.pod == "prometheus.monitoring:9090"


async def test_the_prometheus_url_goes_through_the_guard() -> None:
    source = PrometheusQuery(url="http://169.254.169.254/", match=MATCH)
    async with prometheus(FLEET) as client:
        (result,) = await query_prometheus(
            client, source, guard=TargetGuard([]), timeout_s=5, max_bytes=1 << 20
        )
    assert result.reason == "refused"


async def test_histogram_series_come_back_per_pod_with_their_buckets() -> None:
    ttft = [
        series(f"{TTFT}_bucket", "chat-0", "3", engine="0", model_name="llama", le="0.1"),
        series(f"{TTFT}_bucket", "chat-0", "4", engine="0", model_name="llama", le="+Inf"),
        series(f"{TTFT}_sum", "chat-0", "0.5", engine="0", model_name="llama"),
        series(f"{TTFT}_count", "chat-0", "4", engine="0", model_name="llama"),
    ]
    answers = {**FLEET, "histograms": ttft}
    async with prometheus(answers) as client:
        results = await query_prometheus(client, SOURCE, guard=None, timeout_s=5, max_bytes=1 << 20)
    by_pod = {r.pod: r for r in results}
    metrics = by_pod["chat-0"].metrics
    assert metrics is not None
    histogram = metrics.histograms[TTFT]
    assert histogram.count == 4 and histogram.sum == 0.5
    assert histogram.quantile(0.5) == pytest.approx(0.1 * 2 / 3)  # rank 2 of 3 in [0, 0.1]
    chat1 = by_pod["chat-1"].metrics
    assert chat1 is not None and not chat1.histograms
