"""``GET /metrics``: the exposition of kvcap's predictions, the live snapshots and its own health.

Rendering reads immutable snapshots and runs in a worker thread (about half a second for 1,000 deployments),
so neither a slow target nor a large fleet delays the event loop serving plans and admission reviews.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response

from service.exporter.collector import CONTENT_TYPE, SelfMetrics, admission_metrics, render_metrics
from service.live.manager import LiveManager

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    summary="Prometheus exposition",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {}}}},
)
async def metrics(request: Request) -> Response:
    live: LiveManager | None = getattr(request.app.state, "live", None)
    predictions = getattr(request.app.state, "predictions", None)
    capacities = predictions.capacities if predictions is not None else {}
    latency_predictions = getattr(request.app.state, "latency_predictions", None)
    latency = latency_predictions.latency if latency_predictions is not None else {}
    observations = live.observations if live is not None else {}
    self_metrics = SelfMetrics.of(live) if live is not None else None
    body = await asyncio.to_thread(
        render_metrics, capacities, observations, self_metrics, admission_metrics, latency
    )
    return Response(body, media_type=CONTENT_TYPE)
