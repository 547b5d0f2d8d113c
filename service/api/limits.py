"""Request body size limit as pure ASGI middleware (checked before any handler parses the body).

A body over the limit is a 413 however it arrives: a declared ``Content-Length`` is refused before a byte is
read; a body without one (``Transfer-Encoding: chunked``) is counted as it streams, and the first chunk past
the limit raises an ``HTTPException(413)`` inside the handler's body read. It has to be an ``HTTPException``:
FastAPI turns any other exception raised while reading a body into "400: There was an error parsing the
body". kvcap does not decode compressed request bodies, so a ``Content-Encoding`` other than ``identity`` is
a 415 (RFC 9110 §15.5.16) rather than bytes parsed as JSON — and no zip bomb is ever inflated.
"""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodySizeLimit:
    """Reject bodies over ``max_bytes`` with 413, by ``Content-Length`` or while streaming."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _reject(
        self, send: Send, *, status: int = 413, error: str = "PayloadTooLarge", detail: str | None = None
    ) -> None:
        body = json.dumps(
            {"error": error, "detail": detail or f"request body exceeds {self.max_bytes} bytes"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
                await self._reject(
                    send,
                    status=415,
                    error="UnsupportedMediaType",
                    detail="compressed request bodies are not accepted; send the body without Content-Encoding",
                )
                return
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._reject(send)
                    return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._reject(send)


class _TooLarge(HTTPException):
    """Raised from the body read; the app's handlers render it as the usual 413 error body."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(status_code=413, detail=f"request body exceeds {max_bytes} bytes")
