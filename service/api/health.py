"""Liveness and readiness.

``/healthz`` answers while the process runs. ``/readyz`` also checks the database with a bounded query and
answers 503 when it is down. Plans and admission reviews keep answering from the in-memory catalog while the
database is away, so Kubernetes readiness probes use ``/readyz?degraded_ok=true``: 200 (``"status":
"degraded"``) as long as a catalog snapshot is loaded, so an outage of the database never removes the webhook
from its Service.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import text

router = APIRouter(tags=["health"])
logger = logging.getLogger("kvcap.health")


class CatalogState(BaseModel):
    source: str
    models: int
    gpus: int


class Readiness(BaseModel):
    status: Literal["ready", "degraded", "not ready"]
    database: Literal["ok", "unavailable", "not configured"]
    catalog: CatalogState | None


@router.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness (checks the database)",
    responses={200: {"model": Readiness}, 503: {"model": Readiness, "description": "not ready"}},
)
async def readyz(
    request: Request,
    degraded_ok: Annotated[
        bool, Query(description="200 while serving from the in-memory catalog without a database")
    ] = False,
) -> JSONResponse:
    engine = getattr(request.app.state, "engine", None)
    holder = getattr(request.app.state, "catalog", None)
    catalog = (
        {
            "source": holder.snapshot.source,
            "models": len(holder.snapshot.models),
            "gpus": len(holder.snapshot.gpus),
        }
        if holder
        else None
    )
    body: dict[str, Any] = {"status": "ready", "database": "ok", "catalog": catalog}
    database_ok = engine is not None
    if engine is not None:
        try:
            async with asyncio.timeout(3):
                async with engine.connect() as conn:
                    await conn.execute(text("SELECT 1"))
        except Exception as exc:
            logger.warning("readiness check: database unavailable (%s)", type(exc).__name__)
            database_ok = False
    if database_ok:
        return JSONResponse(body)
    body["database"] = "unavailable" if engine is not None else "not configured"
    if degraded_ok and catalog is not None:
        body["status"] = "degraded"
        return JSONResponse(body)
    body["status"] = "not ready"
    return JSONResponse(body, status_code=503)
