"""kvcap's HTTP edge as one pure-ASGI callable, and lanes that answer chosen routes ahead of the router.

``Edge`` does what the four middlewares ``RequestId`` (``request_id``), ``RequestMetrics``
(``service.exporter.http``), ``RefuseControlCharacters`` (``text``) and ``BodySizeLimit`` (``limits``) did in
that order, outermost first, with the same answers: the ``X-Request-ID`` header and the request id bound for
every log line of the request; one duration sample per request; 422 for a control character in the path or
query string; 415 for a compressed body; 413 for a body over the limit, by ``Content-Length`` or while it
streams. Four middlewares cost four coroutine frames and six closures per request; one costs one and two.

A *lane* answers one ``POST`` path from the request's bytes before FastAPI's router sees it: ``Lane.answer``
returns the JSON bytes of a ``200`` or ``None``. ``None`` sends the request on through the router as if no
lane existed (the body it read is replayed), so everything a lane does not answer itself — invalid bodies,
errors, unusual content types, bodies over the limit — is answered by the route, exactly as without the lane.
The lane's answer carries the headers the route's ``Response(body, media_type="application/json")`` has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Protocol

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from structlog.contextvars import bind_contextvars, reset_contextvars

from service.api.limits import BodySizeLimit, _TooLarge
from service.api.request_id import HEADER, request_id_from
from service.api.text import _problem, _reject

_REQUEST_ID = HEADER.encode()
_JSON = b"application/json"


class RequestObserver(Protocol):
    def observe_request(
        self, *, method: str, route: str | None, status: int, duration_seconds: float
    ) -> None: ...


class Lane(Protocol):
    route: str
    """The route template the lane answers for (its metrics label)."""

    def answer(self, scope: Scope, body: bytes) -> bytes | None:
        """The body of a ``200 application/json`` answer, or ``None`` to leave the request to the router."""


def _json_body(scope: Scope) -> bool:
    """The request's ``Content-Type`` is ``application/json`` (parameters aside): FastAPI parses it as JSON."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return bool(value.split(b";", 1)[0].strip().lower() == _JSON)
    return False


class Edge:
    """Request id, metrics, control characters and the body limit in one ASGI callable (see the module)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        metrics: RequestObserver,
        lanes: Mapping[str, Lane] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.metrics = metrics
        self.lanes = dict(lanes or {})
        self._limit = BodySizeLimit(app, max_bytes=max_bytes)  # its rejections, worded as before

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(scope.get("headers", []))
        scope.setdefault("state", {})["request_id"] = request_id
        id_header = (_REQUEST_ID, request_id.encode("latin-1"))
        started = perf_counter()
        status = 500  # an exception that escapes is rendered as 500 by Starlette's outermost middleware
        responded = False
        route: str | None = None

        async def edge_send(message: Message) -> None:
            nonlocal status, responded
            if message["type"] == "http.response.start":
                status = int(message["status"])
                responded = True
                headers = message.get("headers", [])
                if any(name == _REQUEST_ID for name, _ in headers):
                    MutableHeaders(scope=message)[HEADER] = request_id
                else:
                    message["headers"] = [*headers, id_header]
            await send(message)

        tokens = bind_contextvars(request_id=request_id)
        try:
            route = await self._handle(scope, receive, edge_send, lambda: responded)
        finally:
            if route is None:
                matched = scope.get("route")
                route = getattr(matched, "path", None)
            self.metrics.observe_request(
                method=str(scope.get("method", "")),
                route=route,
                status=status,
                duration_seconds=perf_counter() - started,
            )
            reset_contextvars(**tokens)

    async def _handle(
        self, scope: Scope, receive: Receive, send: Send, responded: Callable[[], bool]
    ) -> str | None:
        """Everything inside the request id and the timer; the lane's route when a lane answered."""
        problem = _problem(scope)
        if problem is not None:
            await _reject(send, *problem)
            return None
        for name, value in scope.get("headers", ()):
            if name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
                await self._limit._reject(
                    send,
                    status=415,
                    error="UnsupportedMediaType",
                    detail="compressed request bodies are not accepted; send the body without Content-Encoding",
                )
                return None
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._limit._reject(send)
                    return None
        lane = self.lanes.get(scope["path"]) if scope.get("method") == "POST" else None
        buffered: list[Message] = []
        if lane is not None and not scope.get("root_path") and _json_body(scope):
            body = await self._read(receive, buffered)
            if body is not None:
                answer = lane.answer(scope, body)
                if answer is not None:
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 200,
                            "headers": [
                                (b"content-length", str(len(answer)).encode("latin-1")),
                                (b"content-type", _JSON),
                            ],
                        }
                    )
                    await send({"type": "http.response.body", "body": answer})
                    return lane.route
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = buffered.pop(0) if buffered else await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _TooLarge:
            if not responded():
                await self._limit._reject(send)
        return None

    async def _read(self, receive: Receive, buffered: list[Message]) -> bytes | None:
        """The whole body, or ``None`` (the messages read so far stay in ``buffered`` for the router)."""
        size = 0
        while True:
            message = await receive()
            buffered.append(message)
            if message["type"] != "http.request":
                return None
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return None
            if not message.get("more_body", False):
                break
        if len(buffered) == 1:
            return bytes(buffered[0].get("body", b""))
        return b"".join(m.get("body", b"") for m in buffered)
