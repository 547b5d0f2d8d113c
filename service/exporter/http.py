"""ASGI middleware that times every HTTP request into ``kvcap_http_request_duration_seconds``.

Pure ASGI (not Starlette's ``BaseHTTPMiddleware``) so streaming bodies and background tasks are untouched.
The route template comes from ``scope["route"]``, which Starlette's router sets on the shared scope when a
route matches (FastAPI's ``APIRoute.matches`` puts the route object in the child scope).
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.exporter.service_metrics import ServiceMetrics


class RequestMetrics:
    def __init__(self, app: ASGIApp, *, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception that escapes is rendered as 500 by Starlette's outermost middleware

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            route = scope.get("route")
            self.metrics.observe_request(
                method=str(scope.get("method", "")),
                route=getattr(route, "path", None),
                status=status,
                duration_seconds=time.perf_counter() - started,
            )
