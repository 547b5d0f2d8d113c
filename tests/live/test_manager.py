"""LiveManager: aggregation over pods, error counters, atomic snapshots and the background loop."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from service.live.coordination import Coordinator, SingleCoordinator
from service.live.manager import LiveManager, LiveTarget
from service.live.schemas import parse_live_source

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def busy(vllm_metrics_dir: Path) -> bytes:
    return (vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_bytes()


def with_blocks(body: bytes, blocks: int) -> bytes:
    return body.replace(b'num_gpu_blocks="8192"', f'num_gpu_blocks="{blocks}"'.encode())


def with_usage(body: bytes, usage: float) -> bytes:
    return body.replace(b"0.009766817238432424", repr(usage).encode())


def scrape_target(namespace: str, name: str, *urls: str) -> LiveTarget:
    return LiveTarget(namespace=namespace, name=name, source=parse_live_source({"scrape_urls": list(urls)}))


def manager_for(bodies: dict[str, bytes | int]) -> LiveManager:
    """A manager whose HTTP client answers by host: bytes → 200 with that body, int → that status."""

    def handler(request: httpx.Request) -> httpx.Response:
        answer = bodies.get(request.url.host, 404)
        if isinstance(answer, int):
            return httpx.Response(answer)
        return httpx.Response(200, content=answer)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return LiveManager(
        client=client, guard=None, timeout_s=5, max_bytes=4 * MiB, concurrency=8, owns_client=True
    )


async def test_blocks_are_the_median_over_pods_and_the_odd_pod_stays_visible(busy: bytes) -> None:
    manager = manager_for(
        {
            "pod-a": with_usage(busy, 0.2),
            "pod-b": with_usage(busy, 0.4),
            "pod-c": with_usage(with_blocks(busy, 4096), 0.6),
        }
    )
    target = scrape_target(
        "llm", "chat", "http://pod-a:8000/metrics", "http://pod-b:8000/metrics", "http://pod-c:8000/metrics"
    )
    await manager.refresh([target])
    await manager.aclose()
    observation = manager.observations[("llm", "chat")]
    assert observation.num_gpu_blocks == 8192
    assert {p.pod: p.num_gpu_blocks for p in observation.pods} == {
        "pod-a:8000": 8192,
        "pod-b:8000": 8192,
        "pod-c:8000": 4096,
    }
    assert observation.kv_cache_usage_ratio == pytest.approx(0.4)
    assert observation.requests_running == 24.0
    assert observation.requests_waiting == 0.0
    assert observation.replicas == 3
    assert observation.source_kind == "scrape_urls"
    assert observation.cache_config is not None
    assert observation.cache_config["block_size"] == "128"
    assert observation.cache_config["gpu_memory_utilization"] == "0.92"


async def test_an_even_number_of_pods_reports_a_block_count_some_pod_really_has(busy: bytes) -> None:
    manager = manager_for({"a": with_blocks(busy, 1000), "b": with_blocks(busy, 2000)})
    await manager.refresh([scrape_target("llm", "chat", "http://a/metrics", "http://b/metrics")])
    await manager.aclose()
    assert manager.observations[("llm", "chat")].num_gpu_blocks == 1000


async def test_failed_targets_count_by_reason_and_do_not_dilute_the_aggregates(busy: bytes) -> None:
    manager = manager_for({"good": busy, "bad": 503, "html": b"<html></html>"})
    target = scrape_target("llm", "chat", "http://good/metrics", "http://bad/metrics", "http://html/metrics")
    await manager.refresh([target])
    await manager.refresh([target])
    await manager.aclose()
    observation = manager.observations[("llm", "chat")]
    assert observation.replicas == 1
    assert observation.requests_running == 8.0
    assert observation.targets_up == {
        "http://good/metrics": True,
        "http://bad/metrics": False,
        "http://html/metrics": False,
    }
    assert dict(observation.errors_total) == {"http_status": 2, "parse": 2}


async def test_a_deployment_with_every_target_down_has_no_observed_blocks(busy: bytes) -> None:
    manager = manager_for({})
    await manager.refresh([scrape_target("llm", "gone", "http://nowhere/metrics")])
    await manager.aclose()
    observation = manager.observations[("llm", "gone")]
    assert (observation.num_gpu_blocks, observation.replicas, observation.cache_config) == (None, 0, None)


async def test_two_urls_on_one_host_port_stay_two_pods(busy: bytes) -> None:
    manager = manager_for({"gateway": busy})
    await manager.refresh([scrape_target("llm", "chat", "http://gateway:8000/a", "http://gateway:8000/b")])
    await manager.aclose()
    pods = [p.pod for p in manager.observations[("llm", "chat")].pods]
    assert len(set(pods)) == 2


async def test_a_kubernetes_source_outside_a_cluster_is_a_discovery_failure_not_a_crash(busy: bytes) -> None:
    manager = manager_for({"pod-a": busy})
    kube = LiveTarget(
        namespace="llm",
        name="k8s",
        source=parse_live_source({"kubernetes": {"namespace": "llm", "label_selector": "app=vllm"}}),
    )
    await manager.refresh([kube, scrape_target("llm", "static", "http://pod-a/metrics")])
    await manager.aclose()
    observation = manager.observations[("llm", "k8s")]
    (pod,) = observation.pods
    assert (pod.up, pod.reason) == (False, "discovery")
    assert dict(observation.errors_total) == {"discovery": 1}
    assert manager.observations[("llm", "static")].replicas == 1


async def test_deployments_no_longer_given_leave_the_snapshot(busy: bytes) -> None:
    manager = manager_for({"a": busy, "b": busy})
    await manager.refresh(
        [scrape_target("llm", "one", "http://a/m"), scrape_target("llm", "two", "http://b/m")]
    )
    first = manager.observations
    await manager.refresh([scrape_target("llm", "two", "http://b/m")])
    await manager.aclose()
    assert set(first) == {("llm", "one"), ("llm", "two")}  # the earlier snapshot is untouched
    assert set(manager.observations) == {("llm", "two")}
    assert manager.deployments_tracked == 1
    assert manager.last_refresh_timestamp_s is not None
    assert manager.last_refresh_duration_s is not None


class OnlyCoordinator(Coordinator):
    def __init__(self, keys: set[str]) -> None:
        self.keys = keys

    async def owned(self, keys: Sequence[str]) -> set[str]:
        return set(keys) & self.keys


async def test_run_refreshes_only_owned_deployments_and_stops_cleanly_when_cancelled(busy: bytes) -> None:
    manager = manager_for({"a": busy, "b": busy})
    targets = [scrape_target("llm", "one", "http://a/m"), scrape_target("llm", "two", "http://b/m")]
    calls = 0
    third_call = asyncio.Event()

    async def provider() -> list[LiveTarget]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("database down")  # a failing provider keeps the last snapshot
        if calls >= 3:
            third_call.set()
        return targets

    task = asyncio.create_task(manager.run(provider, 0.0, OnlyCoordinator({"llm/two"})))
    await asyncio.wait_for(third_call.wait(), timeout=30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await manager.aclose()
    assert set(manager.observations) == {("llm", "two")}


async def test_single_coordinator_owns_everything() -> None:
    assert await SingleCoordinator().owned(["a/b", "c/d"]) == {"a/b", "c/d"}
