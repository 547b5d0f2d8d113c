"""The HTTP transport of the scrape client: one HTTP/1.1 exchange per connection, on plain asyncio streams.

httpx's default transport (httpcore over anyio) spends ~1.5 ms of CPU on each scrape of a 52 KiB vLLM
exposition on a small VM — a connection pool, a cancel scope per socket operation, a lock per request — where
the exchange itself (connect, one request, read the body, close) costs ~0.3 ms on asyncio streams. A refresh of
a thousand targets is CPU-bound, so that difference is most of a refresh. ``ScrapeTransport`` keeps httpx's
client (its ``Request``/``Response``, headers, redirects not followed, its exceptions) and does only what the
scraper needs below it: open a TCP (or TLS) connection, write the request, read the answer with h11 (the
HTTP/1.1 state machine httpcore itself uses: Content-Length, chunked and close-delimited bodies, malformed
answers refused), hand the body out as it arrives, and close the connection when the response is closed.

Connections are never reused: a scrape target comes round again only after the scrape interval, long after
vLLM's server (uvicorn, 5 s keep-alive) has dropped an idle connection — the pool httpcore kept was never used
(``max_keepalive_connections=0``). TLS uses the context httpx would build for the same ``verify`` (its
``create_ssl_context``, HTTP/1.1 by ALPN). Errors are httpx's: ``ConnectError``/``ConnectTimeout`` while
connecting, ``ReadTimeout``/``WriteTimeout`` on a stalled socket, ``ReadError``/``WriteError`` when it breaks,
``RemoteProtocolError`` for an answer that is not HTTP/1.1 — so ``scraper.classify`` reads them as before.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx

READ_SIZE = 1 << 16
"""Bytes asked of the socket per read (the stream's buffer limit too)."""
HAPPY_EYEBALLS_DELAY_S = 0.25
"""RFC 8305's recommended delay before trying a host's next address (what anyio's ``connect_tcp`` uses)."""


def _happy_eyeballs() -> dict[str, float]:
    """``happy_eyeballs_delay`` for asyncio's own loops; uvloop's ``create_connection`` has no such argument (a
    ``TypeError`` for every scrape run on the loop uvicorn serves on, uvloop where it is installed)."""
    if isinstance(asyncio.get_running_loop(), asyncio.BaseEventLoop):
        return {"happy_eyeballs_delay": HAPPY_EYEBALLS_DELAY_S}
    return {}


class _PeerInfo:
    """``response.extensions["network_stream"]``: the address the connection really reached (``server_addr``),
    as httpcore's stream answers it, for the guard's DNS-rebinding check."""

    __slots__ = ("_writer",)

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    def get_extra_info(self, info: str) -> Any:
        if info == "server_addr":
            return self._writer.get_extra_info("peername")
        if info == "client_addr":
            return self._writer.get_extra_info("sockname")
        if info == "ssl_object":
            return self._writer.get_extra_info("ssl_object")
        return None


class _Exchange:
    """One request and its response on one connection."""

    __slots__ = ("_closed", "_h11", "_read_timeout_s", "_reader", "_slot", "_writer")

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        read_timeout_s: float | None,
        slot: asyncio.Semaphore,
    ) -> None:
        self._reader, self._writer = reader, writer
        self._h11 = h11.Connection(our_role=h11.CLIENT)
        self._read_timeout_s = read_timeout_s
        self._slot = slot
        self._closed = False

    async def send(self, request: httpx.Request, write_timeout_s: float | None) -> None:
        target = request.url.raw_path
        headers = request.headers.raw
        body = await request.aread()
        wire = self._h11.send(h11.Request(method=request.method, target=target, headers=headers))
        if body:
            wire += self._h11.send(h11.Data(data=body))
        wire += self._h11.send(h11.EndOfMessage())
        self._writer.write(wire)
        try:
            async with asyncio.timeout(write_timeout_s):
                await self._writer.drain()
        except TimeoutError:
            raise httpx.WriteTimeout("timed out writing the request", request=request) from None
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__, request=request) from None

    async def _next_event(self, request: httpx.Request) -> Any:
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc), request=request) from None
            if event is not h11.NEED_DATA:
                return event
            try:
                async with asyncio.timeout(self._read_timeout_s):
                    data = await self._reader.read(READ_SIZE)
            except TimeoutError:
                raise httpx.ReadTimeout("timed out reading the response", request=request) from None
            except OSError as exc:
                raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from None
            try:
                self._h11.receive_data(
                    data
                )  # b"" at EOF: h11 ends a close-delimited body or calls it truncated
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc), request=request) from None

    async def response_head(self, request: httpx.Request) -> h11.Response:
        while True:
            event = await self._next_event(request)
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):  # pragma: no cover - h11 yields nothing else
                raise httpx.RemoteProtocolError(f"unexpected {type(event).__name__}", request=request)

    async def body(self, request: httpx.Request) -> AsyncIterator[bytes]:
        while True:
            event = await self._next_event(request)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._writer.close()  # nothing is drained: an abandoned body costs no more reads
            self._slot.release()


class _ResponseBody(httpx.AsyncByteStream):
    def __init__(self, exchange: _Exchange, request: httpx.Request) -> None:
        self._exchange, self._request = exchange, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._exchange.body(self._request):
            yield chunk

    async def aclose(self) -> None:
        self._exchange.close()


def _timeouts(request: httpx.Request) -> dict[str, float | None]:
    timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
    return timeouts


class ScrapeTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over a fresh connection per request (see the module docstring); at most ``max_connections``
    open at once, as the pool it replaces allowed."""

    def __init__(self, *, max_connections: int, verify: bool = True) -> None:
        self._slots = asyncio.Semaphore(max_connections)
        self._verify = verify
        self._ssl_context: ssl.SSLContext | None = None

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            context = httpx.create_ssl_context(verify=self._verify, trust_env=False)
            context.set_alpn_protocols(["http/1.1"])
            self._ssl_context = context
        return self._ssl_context

    async def _connect(
        self, request: httpx.Request, timeout_s: float | None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported scheme {url.scheme!r}", request=request)
        port = url.port or (443 if url.scheme == "https" else 80)
        tls = self._tls() if url.scheme == "https" else None
        try:
            async with asyncio.timeout(timeout_s):
                return await asyncio.open_connection(
                    url.host,
                    port,
                    ssl=tls,
                    server_hostname=url.host if tls is not None else None,
                    limit=READ_SIZE,
                    **_happy_eyeballs(),
                )
        except TimeoutError:
            raise httpx.ConnectTimeout("timed out connecting", request=request) from None
        except (OSError, ssl.SSLError) as exc:  # refused, unreachable, DNS, a failed TLS handshake
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = _timeouts(request)
        await self._slots.acquire()  # released when the exchange closes
        try:
            reader, writer = await self._connect(request, timeouts.get("connect"))
        except BaseException:
            self._slots.release()
            raise
        exchange = _Exchange(reader, writer, read_timeout_s=timeouts.get("read"), slot=self._slots)
        try:
            await exchange.send(request, timeouts.get("write"))
            head = await exchange.response_head(request)
        except BaseException:
            exchange.close()
            raise
        return httpx.Response(
            head.status_code,
            headers=head.headers.raw_items(),
            stream=_ResponseBody(exchange, request),
            extensions={
                "http_version": b"HTTP/" + head.http_version,
                "reason_phrase": head.reason,
                "network_stream": _PeerInfo(writer),
            },
        )
