"""Liveness and readiness.

``/healthz`` answers while the process runs. ``/readyz`` also checks the database with a bounded query; when
the database is down it answers 503, although plans and admission keep answering from the in-memory catalog.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

router = APIRouter(tags=["health"])
logger = logging.getLogger("kvcap.health")


@router.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz", summary="Readiness (checks the database)", responses={503: {"description": "not ready"}}
)
async def readyz(request: Request) -> JSONResponse:
    engine = getattr(request.app.state, "engine", None)
    body: dict[str, Any] = {"status": "ready", "database": "ok"}
    if engine is None:
        return JSONResponse({"status": "not ready", "database": "not configured"}, status_code=503)
    try:
        async with asyncio.timeout(3):
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
    except Exception as exc:
        logger.warning("readiness check failed: %s", type(exc).__name__)
        return JSONResponse({"status": "not ready", "database": "unavailable"}, status_code=503)
    return JSONResponse(body)
