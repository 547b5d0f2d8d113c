"""The scraper: error classification on a mock transport, and real sockets for the targets that misbehave."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from service.live.guard import TargetGuard
from service.live.scraper import ScrapeTarget, make_client, pod_from_url, scrape, scrape_many
from tests.live.stub_server import HUGE_BYTES, StubServer, closed_port

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def busy(vllm_metrics_dir: Path) -> bytes:
    return (vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_bytes()


def mock_client(handler) -> httpx.AsyncClient:  # type: ignore[no-untyped-def]
    return httpx.AsyncClient(transport=httpx.MockTransport(handler), follow_redirects=False)


async def test_a_healthy_target_yields_its_metrics_and_host_port_as_pod(busy: bytes) -> None:
    async with mock_client(lambda request: httpx.Response(200, content=busy)) as client:
        result = await scrape(client, "http://10.0.0.5:8000/metrics", guard=None, timeout_s=5, max_bytes=MiB)
    assert result.ok
    assert result.reason is None
    assert result.pod == "10.0.0.5:8000"
    assert result.target == "http://10.0.0.5:8000/metrics"
    assert result.metrics is not None
    assert result.metrics.num_gpu_blocks == 8192


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (httpx.Response(503, text="overloaded"), "http_status"),
        (httpx.Response(404), "http_status"),
        (httpx.Response(301, headers={"Location": "http://169.254.169.254/"}), "redirect"),
        (httpx.Response(200, text="<html>login</html>"), "parse"),
        (httpx.Response(200, content=b"x" * (MiB + 1)), "body_too_large"),
        (httpx.Response(200, headers={"Content-Length": str(50 * MiB)}, content=b""), "body_too_large"),
        (httpx.Response(200, headers={"Content-Encoding": "gzip"}, content=b"\x1f\x8b"), "parse"),
    ],
    ids=["503", "404", "redirect", "html", "streamed-too-large", "declared-too-large", "gzip"],
)
async def test_bad_answers_are_classified_by_reason(response: httpx.Response, reason: str) -> None:
    async with mock_client(lambda request: response) as client:
        result = await scrape(client, "http://10.0.0.5:8000/metrics", guard=None, timeout_s=5, max_bytes=MiB)
    assert not result.ok
    assert result.reason == reason
    assert result.metrics is None


async def test_connection_errors_and_transport_timeouts_are_classified() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out", request=request)

    async with mock_client(refuse) as client:
        assert (
            await scrape(client, "http://10.0.0.5/m", guard=None, timeout_s=5, max_bytes=MiB)
        ).reason == "connect"
    async with mock_client(slow) as client:
        assert (
            await scrape(client, "http://10.0.0.5/m", guard=None, timeout_s=5, max_bytes=MiB)
        ).reason == "timeout"


async def test_a_refused_url_is_never_requested() -> None:
    requested: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requested.append(str(request.url))
        return httpx.Response(200)

    async with mock_client(handler) as client:
        result = await scrape(
            client, "http://169.254.169.254/latest/", guard=TargetGuard([]), timeout_s=5, max_bytes=MiB
        )
    assert result.reason == "refused"
    assert "metadata" in result.detail
    assert requested == []


async def test_scrape_many_keeps_order_and_pod_names(busy: bytes) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=busy) if request.url.host == "a" else httpx.Response(500)

    async with mock_client(handler) as client:
        results = await scrape_many(
            client,
            [ScrapeTarget("http://a:8000/metrics", pod="chat-0"), "http://b:8000/metrics"],
            guard=None,
            timeout_s=5,
            max_bytes=MiB,
            concurrency=1,
        )
    assert [(r.pod, r.ok) for r in results] == [("chat-0", True), ("b:8000", False)]


def test_pod_from_url_fills_in_default_ports_and_brackets_ipv6() -> None:
    assert pod_from_url("http://vllm:8000/metrics") == "vllm:8000"
    assert pod_from_url("https://vllm/metrics") == "vllm:443"
    assert pod_from_url("http://[2001:db8::1]/metrics") == "[2001:db8::1]:80"


# -- real sockets ----------------------------------------------------------------------------------------------


@pytest.fixture
async def stub(busy: bytes) -> AsyncIterator[StubServer]:
    server = StubServer(
        {"/ok/a": busy, "/ok/b": busy.replace(b'num_gpu_blocks="8192"', b'num_gpu_blocks="4096"')}
    )
    await server.start()
    yield server
    await server.close()


async def test_real_server_misbehaviour_costs_each_bad_target_only_itself(stub: StubServer) -> None:
    urls = {
        "ok-a": stub.url("/ok/a"),
        "ok-b": stub.url("/ok/b"),
        "down": f"http://127.0.0.1:{closed_port()}/metrics",
        "hang": stub.url("/hang"),
        "garbage": stub.url("/garbage"),
        "html": stub.url("/html"),
        "huge": stub.url("/huge"),
        "redirect": stub.url("/redirect"),
        "error": stub.url("/error"),
    }
    async with make_client(concurrency=16) as client:
        results = await scrape_many(
            client, list(urls.values()), guard=TargetGuard([]), timeout_s=1.0, max_bytes=MiB, concurrency=16
        )
    by_name = dict(zip(urls, results, strict=True))
    assert {name: r.reason for name, r in by_name.items()} == {
        "ok-a": None,
        "ok-b": None,
        "down": "connect",
        "hang": "timeout",
        "garbage": "parse",
        "html": "parse",
        "huge": "body_too_large",
        "redirect": "redirect",
        "error": "http_status",
    }
    assert by_name["ok-a"].metrics is not None
    assert by_name["ok-a"].metrics.num_gpu_blocks == 8192
    assert by_name["ok-b"].metrics is not None
    assert by_name["ok-b"].metrics.num_gpu_blocks == 4096
    # The redirect pointed at the metadata service; it was reported, not followed.
    assert "169.254.169.254" in by_name["redirect"].detail
    assert all(
        path.startswith(("/ok", "/hang", "/garbage", "/html", "/huge", "/redirect", "/error"))
        for path in stub.requests
    )


async def test_a_50_mb_body_is_abandoned_at_the_cap_not_read_to_the_end(stub: StubServer) -> None:
    async with make_client(concurrency=1) as client:
        result = await scrape(client, stub.url("/huge"), guard=None, timeout_s=30, max_bytes=MiB)
    assert result.reason == "body_too_large"
    await _wait(stub)
    assert stub.huge_sent < HUGE_BYTES // 2


async def _wait(stub: StubServer) -> None:
    # Not a timed assertion: a generous bound so a broken server cannot hang the suite.
    await asyncio.wait_for(stub.huge_done.wait(), timeout=30)


async def test_the_guard_checks_real_targets_before_connecting(stub: StubServer) -> None:
    guard = TargetGuard(["10.0.0.0/8"])
    async with make_client(concurrency=1) as client:
        result = await scrape(client, stub.url("/ok/a"), guard=guard, timeout_s=5, max_bytes=MiB)
    assert result.reason == "refused"
    assert stub.requests == []


async def test_the_address_a_connection_really_reached_is_checked_against_dns_rebinding(
    stub: StubServer,
) -> None:
    # Our resolution says 10.0.0.1 (allowed); the HTTP client's own lookup then reaches 127.0.0.1 (not allowed).
    async def rebinding_resolver(host: str, port: int) -> list[str]:
        return ["10.0.0.1"]

    guard = TargetGuard(["10.0.0.0/8"], resolver=rebinding_resolver)
    async with make_client(concurrency=1) as client:
        result = await scrape(
            client, f"http://localhost:{stub.port}/ok/a", guard=guard, timeout_s=5, max_bytes=MiB
        )
    assert result.reason == "refused"
    assert "127.0.0.1" in result.detail
