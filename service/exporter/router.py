"""``GET /metrics``: the exposition of kvcap's predictions, the live snapshots and its own health.

Rendering reads immutable snapshots and runs in a worker thread, so neither a slow target nor a large fleet
delays the event loop serving plans and admission reviews. The per-deployment part is rendered once per
snapshot (``service.exporter.exposition``; the live worker does it right after each refresh), so a scrape
costs only the small process-wide part.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response

from service.exporter.collector import CONTENT_TYPE, SelfMetrics, admission_metrics
from service.exporter.exposition import ExpositionCache
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
    latency = latency_predictions.latency if latency_predictions is not None else None
    observations = live.observations if live is not None else {}
    self_metrics = SelfMetrics.of(live) if live is not None else None
    cache: ExpositionCache | None = getattr(request.app.state, "exposition", None)
    if cache is None:
        cache = request.app.state.exposition = ExpositionCache()
    service = getattr(request.app.state, "service_metrics", None)
    body = await asyncio.to_thread(
        cache.render, capacities, observations, self_metrics, admission_metrics, service, latency
    )
    return Response(body, media_type=CONTENT_TYPE)
