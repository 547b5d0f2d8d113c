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
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.datastructures import State

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


CHECK_SECONDS = 3.0


async def _ping(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        await conn.execute(text("SELECT 1"))


def _database_check(state: State, engine: AsyncEngine) -> asyncio.Task[None]:
    """The running database check, or a new one.

    The probe waits for it at most ``CHECK_SECONDS`` but does not cancel it: cancelling a query on a server
    that hangs (rather than refusing connections) makes psycopg first try to cancel it server-side, which
    kept ``/readyz`` — ``degraded_ok`` included — from answering for 13 s and more, past any probe timeout.
    At most one check runs at a time, so probes during a hang do not pile up connections.
    """
    task: asyncio.Task[None] | None = getattr(state, "readiness_check", None)
    if task is None or task.done():
        task = asyncio.create_task(_ping(engine), name="readiness database check")
        task.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved: no warning
        state.readiness_check = task
    return task


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
            await asyncio.wait_for(asyncio.shield(_database_check(request.app.state, engine)), CHECK_SECONDS)
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
