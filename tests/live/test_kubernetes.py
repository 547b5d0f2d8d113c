"""Pod discovery through the Kubernetes API (httpx only), against a mock API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from service.live.kubernetes import (
    ClusterConfig,
    DiscoveredPod,
    DiscoveryError,
    KubernetesDiscovery,
    ServiceAccountToken,
)
from service.live.schemas import KubernetesSelector


def pod(
    name: str,
    ip: str | None = "10.0.0.1",
    *,
    phase: str = "Running",
    ready: str = "True",
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "llm", "labels": {"app": "vllm"}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": ready},
        ],
    }
    if ip is not None:
        status["podIP"] = ip
    return {"metadata": metadata, "status": status}


def pod_list(items: list[dict[str, Any]], continue_token: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"resourceVersion": "12345"}
    if continue_token:
        metadata["continue"] = continue_token
    return {"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": items}


@pytest.fixture
def service_account(tmp_path: Path) -> Path:
    (tmp_path / "token").write_text("token-1\n")
    (tmp_path / "ca.crt").write_text("not used with a mock transport")
    return tmp_path


@pytest.fixture
def config(service_account: Path) -> ClusterConfig:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    return ClusterConfig.in_cluster(environ=env, service_account_dir=service_account)


SELECTOR = KubernetesSelector(namespace="llm", label_selector="app=vllm,tier in (gpu)", port=8000)


async def test_lists_only_running_ready_pods_with_an_address(config: ClusterConfig) -> None:
    seen: list[httpx.Request] = []

    def api(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        items = [
            pod("chat-2", "10.0.0.12"),
            pod("chat-0", "10.0.0.10"),
            pod("chat-1", "10.0.0.11", ready="False"),
            pod("chat-3", "10.0.0.13", phase="Pending"),
            pod("chat-4", None),
            pod("chat-5", "10.0.0.15", deleting=True),
            pod("chat-6", "fd00::6"),
        ]
        return httpx.Response(200, json=pod_list(items))

    discovery = KubernetesDiscovery(config, transport=httpx.MockTransport(api))
    try:
        pods = await discovery.pods(SELECTOR)
    finally:
        await discovery.aclose()
    assert pods == [
        DiscoveredPod("chat-0", "http://10.0.0.10:8000/metrics"),
        DiscoveredPod("chat-2", "http://10.0.0.12:8000/metrics"),
        DiscoveredPod("chat-6", "http://[fd00::6]:8000/metrics"),
    ]
    (request,) = seen
    assert (request.url.host, request.url.path) == ("10.96.0.1", "/api/v1/namespaces/llm/pods")
    assert request.url.params["labelSelector"] == "app=vllm,tier in (gpu)"
    assert request.headers["authorization"] == "Bearer token-1"


async def test_follows_continue_tokens_across_pages(config: ClusterConfig) -> None:
    def api(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("continue") == "page-2":
            return httpx.Response(200, json=pod_list([pod("b", "10.0.0.2")]))
        return httpx.Response(200, json=pod_list([pod("a", "10.0.0.1")], continue_token="page-2"))

    discovery = KubernetesDiscovery(config, transport=httpx.MockTransport(api))
    try:
        pods = await discovery.pods(SELECTOR)
    finally:
        await discovery.aclose()
    assert [p.name for p in pods] == ["a", "b"]


async def test_https_scheme_and_custom_path_build_the_scrape_url(config: ClusterConfig) -> None:
    selector = KubernetesSelector(
        namespace="llm", label_selector="app=vllm", port=8443, path="/v1/metrics", scheme="https"
    )
    discovery = KubernetesDiscovery(
        config,
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json=pod_list([pod("a", "10.0.0.1")]))),
    )
    try:
        (found,) = await discovery.pods(selector)
    finally:
        await discovery.aclose()
    assert found.url == "https://10.0.0.1:8443/v1/metrics"


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (httpx.Response(403, json={"kind": "Status", "reason": "Forbidden"}), "may not list pods"),
        (httpx.Response(500, text="etcd down"), "HTTP 500"),
        (httpx.Response(200, text="{not json"), "invalid JSON"),
        (httpx.Response(200, json={"kind": "Status"}), "PodList"),
    ],
    ids=["forbidden", "server-error", "bad-json", "not-a-pod-list"],
)
async def test_api_failures_are_discovery_errors_that_say_why(
    config: ClusterConfig, response: httpx.Response, message: str
) -> None:
    discovery = KubernetesDiscovery(config, transport=httpx.MockTransport(lambda r: response))
    try:
        with pytest.raises(DiscoveryError, match=message):
            await discovery.pods(SELECTOR)
    finally:
        await discovery.aclose()


def test_outside_a_cluster_discovery_fails_with_a_clear_message(service_account: Path) -> None:
    with pytest.raises(DiscoveryError, match="not running in a Kubernetes cluster"):
        ClusterConfig.in_cluster(environ={}, service_account_dir=service_account)


def test_a_missing_service_account_token_is_reported(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="service-account token"):
        ClusterConfig.in_cluster(
            environ={"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, service_account_dir=tmp_path
        )


def test_in_cluster_config_reads_host_port_token_and_ca(config: ClusterConfig, service_account: Path) -> None:
    assert config.api_url == "https://10.96.0.1:443"
    assert config.token_path == service_account / "token"
    assert config.ca_path == service_account / "ca.crt"
    ipv6 = ClusterConfig.in_cluster(
        environ={"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"},
        service_account_dir=service_account,
    )
    assert ipv6.api_url == "https://[fd00::1]:6443"


def test_the_rotated_token_is_picked_up_when_the_file_changes(service_account: Path) -> None:
    auth = ServiceAccountToken(service_account / "token", reread_s=0)
    first = next(auth.auth_flow(httpx.Request("GET", "https://k8s/api")))
    (service_account / "token").write_text("token-2")
    second = next(auth.auth_flow(httpx.Request("GET", "https://k8s/api")))
    assert first.headers["authorization"] == "Bearer token-1"
    assert second.headers["authorization"] == "Bearer token-2"
