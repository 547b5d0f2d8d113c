"""The scrape client's transport (``service.live.transport``) on real sockets: what goes on the wire, the three
ways an HTTP/1.1 body ends, broken and stalled servers, TLS, and the peer address the guard checks."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import uvloop  # uvicorn[standard]'s loop, on every platform the image and CI run on

from service.live.scraper import classify, fetch_capped, make_client, scrape
from tests.live.stub_server import closed_port
from tests.tls.certificates import CertificateAuthority

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class OneRouteServer:
    """Reads each request head, records it, and lets ``answer`` write whatever it likes."""

    def __init__(self, answer: Answer, *, tls: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.tls = tls
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> OneRouteServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.heads.append(await reader.readuntil(b"\r\n\r\n"))
            await self.answer(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()


def answering(raw: bytes, *, then_wait: bool = False) -> Answer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(raw)
        await writer.drain()
        if then_wait:
            await asyncio.sleep(30)

    return answer


@pytest.fixture
def busy(vllm_metrics_dir: Path) -> bytes:
    return (vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_bytes()


async def _get(url: str, **kwargs: object) -> bytes:
    async with make_client(concurrency=2) as client:
        return await fetch_capped(client, url, max_bytes=1 << 20, timeout_s=5, **kwargs)  # type: ignore[arg-type]


def test_a_scrape_on_uvloop_reads_the_exposition(busy: bytes) -> None:
    """uvicorn serves on uvloop where it is installed; a scrape on that loop (the live loop on the serving loop)
    used to fail every target with uvloop's TypeError for ``happy_eyeballs_delay``."""
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(busy)}\r\n\r\n".encode()

    async def main() -> bytes:
        assert not isinstance(asyncio.get_running_loop(), asyncio.BaseEventLoop)
        async with OneRouteServer(answering(head + busy)) as server:
            return await _get(f"http://127.0.0.1:{server.port}/metrics")

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(main()) == busy


async def test_the_request_on_the_wire_is_a_plain_get_with_the_scrape_headers() -> None:
    async with OneRouteServer(answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")) as server:
        body = await _get(f"http://127.0.0.1:{server.port}/metrics", params={"query": 'up{a="b"}'})
    assert body == b"ok"
    head = server.heads[0].decode()
    request_line, *header_lines = head.strip().split("\r\n")
    assert request_line == "GET /metrics?query=up%7Ba%3D%22b%22%7D HTTP/1.1"
    headers = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in header_lines}
    assert headers["host"] == f"127.0.0.1:{server.port}"
    assert headers["accept-encoding"] == "identity"
    assert headers["accept"].startswith("text/plain;version=0.0.4")
    assert headers["user-agent"].startswith("kvcap/")


@pytest.mark.parametrize(
    "framing",
    ["content-length", "chunked", "close-delimited"],
)
async def test_every_http_1_1_body_framing_reads_the_whole_exposition(busy: bytes, framing: str) -> None:
    if framing == "content-length":
        raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(busy) + busy
    elif framing == "chunked":
        chunks = [busy[i : i + 7000] for i in range(0, len(busy), 7000)]
        raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        raw += b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    else:
        raw = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + busy
    async with OneRouteServer(answering(raw)) as server, make_client(concurrency=1) as client:
        result = await scrape(
            client, f"http://127.0.0.1:{server.port}/metrics", guard=None, timeout_s=5, max_bytes=1 << 20
        )
    assert result.ok, result.detail
    assert result.metrics is not None
    assert result.metrics.num_gpu_blocks == 8192


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n", "connect"),  # not HTTP
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nvllm:", "connect"),  # cut short
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "connect"),  # ambiguous
        (b"", "connect"),  # closed without a word
    ],
    ids=["not-http", "truncated", "two-lengths", "closed"],
)
async def test_broken_answers_are_transport_errors_counted_as_connect(raw: bytes, reason: str) -> None:
    async with OneRouteServer(answering(raw)) as server, make_client(concurrency=1) as client:
        result = await scrape(
            client, f"http://127.0.0.1:{server.port}/metrics", guard=None, timeout_s=5, max_bytes=1 << 20
        )
    assert result.reason == reason, result.detail


async def test_a_refused_connection_is_a_connect_error() -> None:
    with pytest.raises(httpx.ConnectError) as caught:
        await _get(f"http://127.0.0.1:{closed_port()}/metrics")
    assert classify(caught.value)[0] == "connect"


async def test_a_stalled_answer_is_a_read_timeout_from_the_requests_own_timeout() -> None:
    stall = answering(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", then_wait=True)
    async with OneRouteServer(stall) as server, make_client(concurrency=1) as client:
        with pytest.raises(httpx.ReadTimeout) as caught:
            await fetch_capped(client, f"http://127.0.0.1:{server.port}/m", max_bytes=1 << 20, timeout_s=0.2)
    assert classify(caught.value)[0] == "timeout"


async def test_the_connection_limit_is_released_after_answers_and_after_failures() -> None:
    ok = answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    async with OneRouteServer(ok) as server, make_client(concurrency=1) as client:
        url = f"http://127.0.0.1:{server.port}/"
        for _ in range(3):
            with pytest.raises(httpx.ConnectError):
                await fetch_capped(client, f"http://127.0.0.1:{closed_port()}/", max_bytes=10, timeout_s=5)
            assert await fetch_capped(client, url, max_bytes=10, timeout_s=5) == b"ok"
        bodies = await asyncio.gather(
            *(fetch_capped(client, url, max_bytes=10, timeout_s=5) for _ in range(5))
        )
    assert bodies == [b"ok"] * 5


async def test_the_peer_address_is_what_the_connection_reached() -> None:
    empty = answering(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    async with OneRouteServer(empty) as server, make_client(concurrency=1) as client:
        response = await client.send(
            client.build_request("GET", f"http://localhost:{server.port}/"), stream=True
        )
        try:
            stream = response.extensions["network_stream"]
            assert stream.get_extra_info("server_addr")[:2] == ("127.0.0.1", server.port)
            assert response.http_version == "HTTP/1.1"
        finally:
            await response.aclose()


@pytest.fixture
def tls_server_context(tmp_path: Path) -> ssl.SSLContext:
    issued = CertificateAuthority().issue(days=30)
    (tmp_path / "cert.pem").write_bytes(issued.cert_pem)
    (tmp_path / "key.pem").write_bytes(issued.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    return context


async def test_https_is_verified_by_default_and_read_when_verification_is_off(
    tls_server_context: ssl.SSLContext,
) -> None:
    ok = answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    async with OneRouteServer(ok, tls=tls_server_context) as server:
        url = f"https://127.0.0.1:{server.port}/metrics"
        async with make_client(concurrency=1) as client:  # the test CA is trusted by nobody
            with pytest.raises(httpx.ConnectError) as caught:
                await fetch_capped(client, url, max_bytes=10, timeout_s=5)
        assert classify(caught.value)[0] == "connect"
        async with make_client(concurrency=1, verify=False) as client:
            assert await fetch_capped(client, url, max_bytes=10, timeout_s=5) == b"ok"
