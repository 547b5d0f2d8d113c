"""The bar from the issue: a target that is down, hangs, returns garbage, a 50 MB body or a redirect never
breaks ``/metrics`` for the others — through real sockets, the real manager and the real renderer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.exporter.collector import AdmissionMetrics, PredictedCapacity, SelfMetrics, render_metrics
from service.live.guard import TargetGuard
from service.live.manager import LiveManager, LiveTarget
from service.live.schemas import parse_live_source
from service.live.scraper import make_client
from tests.live.stub_server import HUGE_BYTES, StubServer, closed_port

MiB = 1024 * 1024


@pytest.fixture
async def stub(vllm_metrics_dir: Path) -> AsyncIterator[StubServer]:
    busy = (vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_bytes()
    idle = (vllm_metrics_dir / "vllm-0.32.0-cpu-idle.txt").read_bytes()
    server = StubServer({"/chat/0": busy, "/chat/1": idle, "/solo/0": busy})
    await server.start()
    yield server
    await server.close()


def target(name: str, *urls: str) -> LiveTarget:
    return LiveTarget(namespace="llm", name=name, source=parse_live_source({"scrape_urls": list(urls)}))


async def test_bad_targets_never_break_metrics_for_the_healthy_ones(stub: StubServer) -> None:
    down = f"http://127.0.0.1:{closed_port()}/metrics"
    targets = [
        # A deployment whose healthy pods share it with every kind of bad one …
        target(
            "chat",
            stub.url("/chat/0"),
            stub.url("/chat/1"),
            down,
            stub.url("/hang"),
            stub.url("/garbage"),
            stub.url("/huge"),
            stub.url("/redirect"),
        ),
        # … one that is entirely healthy, and one that is entirely broken.
        target("solo", stub.url("/solo/0")),
        target("broken", stub.url("/hang"), stub.url("/huge")),
    ]
    manager = LiveManager(
        client=make_client(concurrency=8),
        guard=TargetGuard([]),
        timeout_s=1.0,
        max_bytes=MiB,
        concurrency=8,
        owns_client=True,
    )
    try:
        await manager.refresh(targets)
    finally:
        await manager.aclose()

    prediction = PredictedCapacity(
        num_gpu_blocks=8192,
        num_gpu_blocks_uncalibrated=8000,
        kv_cache_size_tokens=1_048_576,
        max_concurrency=512.0,
        max_num_seqs=256,
        recommended_replicas=2,
        replicas=2,
    )
    body = render_metrics(
        {("llm", "chat"): prediction, ("llm", "solo"): prediction},
        manager.observations,
        SelfMetrics.of(manager),
        AdmissionMetrics(),
    ).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }

    def value(name: str, deployment: str, **extra: str) -> float | None:
        labels = {"namespace": "llm", "deployment": deployment, **extra}
        return samples.get((name, tuple(sorted(labels.items()))))

    assert value("kvcap_observed_kv_cache_blocks", "chat") == 8192
    assert value("kvcap_observed_replicas", "chat") == 2
    assert value("kvcap_observed_requests_running", "chat") == 8  # busy pod 8 + idle pod 0
    assert value("kvcap_observed_kv_cache_blocks", "solo") == 8192
    assert value("kvcap_prediction_error_ratio", "solo") == 0.0
    assert value("kvcap_observed_replicas", "broken") == 0
    assert value("kvcap_observed_kv_cache_blocks", "broken") is None

    up = {
        url: value("kvcap_target_up", "chat", target=url)
        for url in (
            stub.url("/chat/0"),
            stub.url("/chat/1"),
            down,
            stub.url("/hang"),
            stub.url("/garbage"),
            stub.url("/huge"),
            stub.url("/redirect"),
        )
    }
    assert up == {
        stub.url("/chat/0"): 1.0,
        stub.url("/chat/1"): 1.0,
        down: 0.0,
        stub.url("/hang"): 0.0,
        stub.url("/garbage"): 0.0,
        stub.url("/huge"): 0.0,
        stub.url("/redirect"): 0.0,
    }
    assert value("kvcap_target_up", "solo", target=stub.url("/solo/0")) == 1.0
    errors = {
        reason: value("kvcap_scrape_errors_total", "chat", reason=reason)
        for reason in ("connect", "timeout", "parse", "body_too_large", "redirect")
    }
    assert errors == {"connect": 1, "timeout": 1, "parse": 1, "body_too_large": 1, "redirect": 1}
    assert samples[("kvcap_deployments_tracked", ())] == 3

    # The 50 MB bodies were abandoned at the cap, not read to the end.
    await asyncio.wait_for(stub.huge_done.wait(), timeout=30)
    assert stub.huge_sent < HUGE_BYTES // 2
