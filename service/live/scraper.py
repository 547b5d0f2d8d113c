"""Reading vLLM ``/metrics`` endpoints over HTTP, so that no single target can hurt the others.

Every read is bounded three ways: a semaphore caps how many run at once, ``asyncio.timeout`` caps the whole
exchange (DNS, connect, headers *and* body — a server that trickles one byte a second is cut at the same
deadline as one that never answers), and the body is streamed and abandoned at ``max_bytes`` (a 50 MB body
costs at most ``max_bytes`` of memory, and the connection is dropped rather than drained). Redirects are not
followed: a redirect could lead past the guard to a host nobody registered. Compressed bodies are refused
(``identity`` is requested) because a few KiB of gzip can expand past any cap before it is counted.

A failed read is a ``TargetResult`` with ``ok=False`` and a ``reason`` from a small closed set (the
``reason`` label of ``kvcap_scrape_errors_total``); nothing here raises for a bad target.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import httpx

from service.live.guard import ResolutionError, TargetGuard, TargetRefused
from service.live.parser import ExpositionError, VllmMetrics, parse_vllm_metrics
from service.live.transport import ScrapeTransport

ScrapeReason = Literal[
    "timeout",  # the whole exchange did not finish within the per-target timeout
    "connect",  # DNS failure, refused or reset connection, malformed HTTP
    "http_status",  # an answer other than 200
    "body_too_large",  # more than max_bytes
    "parse",  # 200, but not a vLLM exposition (or not the JSON a Prometheus API returns)
    "refused",  # the guard refused the URL or the address it reached
    "redirect",  # a 3xx answer (redirects are never followed)
    "discovery",  # Kubernetes pod discovery failed (not in a cluster, API error)
    "down",  # the Prometheus source reports the target's own scrape failing (up == 0)
    "error",  # anything else (a bug): logged, counted, and the other targets carry on
]
SCRAPE_REASONS: tuple[ScrapeReason, ...] = (
    "timeout",
    "connect",
    "http_status",
    "body_too_large",
    "parse",
    "refused",
    "redirect",
    "discovery",
    "down",
    "error",
)

USER_AGENT = "kvcap/0.1 (+https://github.com/kvcap/kvcap)"
SCRAPE_HEADERS: Mapping[str, str] = {
    # The classic text format: prometheus-client serves OpenMetrics only when asked for it.
    "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
    "Accept-Encoding": "identity",
}


class FetchError(Exception):
    """A read failed for a reason kvcap counts."""

    def __init__(self, reason: ScrapeReason, detail: str) -> None:
        super().__init__(detail)
        self.reason: ScrapeReason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetResult:
    """One read of one vLLM server (or one pod's series from Prometheus) — the same shape for every source."""

    url: str
    ok: bool
    reason: ScrapeReason | None
    duration_s: float
    metrics: VllmMetrics | None
    pod: str
    target: str = ""
    """Value of the ``target`` label on ``kvcap_target_up``: the URL read, unless the source says otherwise."""
    detail: str = ""

    def __post_init__(self) -> None:
        if not self.target:
            object.__setattr__(self, "target", self.url)


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    url: str
    pod: str | None = None
    """Pod name (Kubernetes); ``host:port`` of the URL when None."""


def pod_from_url(url: str) -> str:
    """``host:port`` of a URL (the default port filled in), the pod label of a static scrape URL."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return url
    host = parsed.host
    if ":" in host:
        host = f"[{host}]"
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return f"{host}:{port}"


def make_client(*, concurrency: int, verify: bool = True) -> httpx.AsyncClient:
    """The HTTP client for scrapes and Prometheus queries.

    ``trust_env=False``: proxy variables and ``.netrc`` credentials must not apply to user-chosen URLs (a proxy
    would also hide the peer address ``check_peer`` verifies). Timeouts come from each call.

    No keep-alive: a connection would be reused only if the same target came round again before vLLM's
    server dropped it (uvicorn's keep-alive is 5 s, the scrape interval 15 s). So the transport is
    ``ScrapeTransport`` (one exchange per connection on asyncio streams, ``service.live.transport``), not
    httpcore's pool: the same requests and answers at a fifth of the CPU per scrape, which is most of a
    thousand-target refresh.
    """
    return httpx.AsyncClient(
        transport=ScrapeTransport(max_connections=concurrency, verify=verify),
        follow_redirects=False,
        trust_env=False,
        timeout=None,
        headers={"User-Agent": USER_AGENT},
    )


def _peer_address(response: httpx.Response) -> str | None:
    stream = response.extensions.get("network_stream")
    if stream is None:
        return None
    address = stream.get_extra_info("server_addr")
    if isinstance(address, tuple) and address:
        return str(address[0])
    return None


async def fetch_capped(
    client: httpx.AsyncClient,
    url: str,
    *,
    max_bytes: int,
    guard: TargetGuard | None = None,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> bytes:
    """GET ``url`` and return at most ``max_bytes`` of body; raise ``FetchError`` for redirects, non-200
    answers, compressed or oversized bodies. Callers wrap it in ``asyncio.timeout`` (the whole exchange)."""
    request_headers = {**SCRAPE_HEADERS, **(headers or {})}
    async with client.stream(
        "GET", url, params=params, headers=request_headers, follow_redirects=False, timeout=timeout_s
    ) as response:
        if guard is not None:
            peer = _peer_address(response)
            if peer is not None:
                guard.check_peer(url, peer)
        if 300 <= response.status_code < 400:
            location = response.headers.get("location", "")[:200]
            raise FetchError("redirect", f"HTTP {response.status_code} to {location or '(no location)'}")
        if response.status_code != 200:
            raise FetchError("http_status", f"HTTP {response.status_code}")
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise FetchError(
                "parse", f"compressed body (Content-Encoding: {encoding}) although identity was asked"
            )
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise FetchError("body_too_large", f"Content-Length {declared} exceeds {max_bytes} bytes")
        chunks: list[bytes] = []
        received = 0
        # Identity only (checked above), so these are the bytes on the wire: nothing inflates past the cap.
        async for chunk in response.aiter_bytes():
            received += len(chunk)
            if received > max_bytes:
                raise FetchError("body_too_large", f"body exceeds {max_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)


def classify(exc: BaseException) -> tuple[ScrapeReason, str]:
    """Map an exception from a read to a counted reason and a short detail for logs."""
    if isinstance(exc, FetchError):
        return exc.reason, exc.detail
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "timeout", "timed out"
    if isinstance(exc, TargetRefused):
        return "refused", exc.reason
    if isinstance(exc, ResolutionError):
        return "connect", str(exc)
    if isinstance(exc, ExpositionError):
        return "parse", str(exc)
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return "refused", str(exc) or type(exc).__name__
    if isinstance(exc, httpx.DecodingError):
        return "parse", str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TransportError | OSError):
        return "connect", f"{type(exc).__name__}: {exc}"[:200]
    return "error", f"{type(exc).__name__}: {exc}"[:200]


async def scrape(
    client: httpx.AsyncClient,
    url: str,
    *,
    guard: TargetGuard | None,
    timeout_s: float,
    max_bytes: int,
    pod: str | None = None,
) -> TargetResult:
    """Read and parse one vLLM ``/metrics`` endpoint; never raises for the target's faults."""
    started = time.perf_counter()
    pod_name = pod or pod_from_url(url)
    try:
        async with asyncio.timeout(timeout_s):
            if guard is not None:
                await guard.check_resolved(url)
            body = await fetch_capped(client, url, max_bytes=max_bytes, guard=guard, timeout_s=timeout_s)
        metrics = parse_vllm_metrics(body.decode("utf-8", errors="replace"))
    except Exception as exc:
        reason, detail = classify(exc)
        return TargetResult(
            url=url,
            ok=False,
            reason=reason,
            duration_s=time.perf_counter() - started,
            metrics=None,
            pod=pod_name,
            detail=detail,
        )
    return TargetResult(
        url=url, ok=True, reason=None, duration_s=time.perf_counter() - started, metrics=metrics, pod=pod_name
    )


async def scrape_many(
    client: httpx.AsyncClient,
    targets: Sequence[ScrapeTarget | str],
    *,
    guard: TargetGuard | None,
    timeout_s: float,
    max_bytes: int,
    concurrency: int | asyncio.Semaphore,
) -> list[TargetResult]:
    """Scrape ``targets`` concurrently, at most ``concurrency`` at a time; results in the order given.

    Pass a shared ``asyncio.Semaphore`` to bound several calls together. The per-target timeout starts once
    a slot is free, so a long queue does not turn into timeouts.
    """
    limit = concurrency if isinstance(concurrency, asyncio.Semaphore) else asyncio.Semaphore(concurrency)

    async def one(target: ScrapeTarget | str) -> TargetResult:
        spec = ScrapeTarget(target) if isinstance(target, str) else target
        async with limit:
            return await scrape(
                client, spec.url, guard=guard, timeout_s=timeout_s, max_bytes=max_bytes, pod=spec.pod
            )

    return list(await asyncio.gather(*(one(t) for t in targets)))
