"""``X-Request-ID``: taken from the request when it is a sane token, generated otherwise, echoed on the
response, and bound for the request's duration so every log line of the request carries it."""

from __future__ import annotations

import re
import uuid

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from structlog.contextvars import bound_contextvars

HEADER = "x-request-id"
# A client-chosen id goes into logs verbatim: letters, digits and a few separators only, bounded, so it can
# neither forge log lines nor blow up their size. Anything else is replaced, not rejected.
_ACCEPTED = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")


def request_id_from(headers: list[tuple[bytes, bytes]]) -> str:
    for name, value in headers:
        if name == HEADER.encode():
            text = value.decode("latin-1")
            if _ACCEPTED.fullmatch(text):
                return text
            break
    return uuid.uuid4().hex


class RequestId:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(scope.get("headers", []))
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = request_id
            await send(message)

        with bound_contextvars(request_id=request_id):
            await self.app(scope, receive, send_with_id)
