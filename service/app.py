"""The FastAPI application: routers, error rendering, limits, and the lifespan that owns engines and tasks."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy.engine import make_url

from service.admission.router import router as admission_router
from service.api.docs import install_offline_docs
from service.api.errors import install_error_handlers
from service.api.health import router as health_router
from service.api.limits import BodySizeLimit
from service.api.text import RefuseControlCharacters
from service.catalog.builtin import builtin_snapshot
from service.catalog.router import router as catalog_router
from service.catalog.snapshot import CatalogHolder
from service.db.session import create_engine, create_sessionmaker
from service.deployments.router import router as deployments_router
from service.deployments.service import DeploymentsHolder
from service.exporter.collector import admission_metrics
from service.exporter.pipeline import Predictions, run_live_loop
from service.exporter.router import router as metrics_router
from service.live.coordination import Coordinator, PostgresCoordinator, SingleCoordinator
from service.live.manager import LiveManager
from service.logs import configure_logging
from service.planning.calibration import CalibrationHolder
from service.planning.router import PlanCache
from service.planning.router import router as planning_router
from service.settings import Settings, get_settings

logger = logging.getLogger("kvcap.app")


async def _every(seconds: float, job: Callable[[], Awaitable[object]], name: str) -> None:
    """Run ``job`` every ``seconds``; failures are logged and retried on the next tick, never fatal."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("%s failed: %s", name, type(exc).__name__)


async def start_catalog(app: FastAPI) -> None:
    """Load the catalog snapshot from the database, or serve the built-in catalog if that is impossible."""
    holder = CatalogHolder(builtin_snapshot())
    app.state.catalog = holder
    try:
        snapshot = await holder.reload(app.state.sessionmaker)
    except Exception as exc:
        holder.replace(builtin_snapshot())
        holder.last_error = f"{type(exc).__name__}"
        logger.warning(
            "catalog not readable from the database (%s); serving the built-in catalog", type(exc).__name__
        )
        return
    if not snapshot.models and not snapshot.gpus:
        holder.replace(builtin_snapshot())
        logger.warning(
            "the database catalog is empty (run `kvcap catalog load`); serving the built-in catalog"
        )


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Engine, in-memory catalog/registry/calibrations, the refresh task and the live-metrics loop."""
    settings: Settings = app.state.settings
    engine = create_engine(settings.database_url, pool_size=settings.database_pool_size)
    app.state.engine = engine
    app.state.sessionmaker = create_sessionmaker(engine)
    logger.info("database %s", make_url(settings.database_url).render_as_string(hide_password=True))
    await start_catalog(app)
    app.state.deployments = DeploymentsHolder()
    app.state.calibrations = CalibrationHolder()
    for holder in (app.state.deployments, app.state.calibrations):
        try:
            await holder.reload(app.state.sessionmaker)
        except Exception as exc:
            logger.warning(
                "%s not readable from the database (%s); starting empty",
                type(holder).__name__,
                type(exc).__name__,
            )

    async def refresh() -> None:
        await app.state.catalog.reload(app.state.sessionmaker)
        await app.state.deployments.reload(app.state.sessionmaker)
        await app.state.calibrations.reload(app.state.sessionmaker)

    app.state.predictions = Predictions()
    app.state.live = live = LiveManager.from_settings(settings)
    coordinator: Coordinator
    if settings.database_url.startswith("postgresql"):
        coordinator = PostgresCoordinator(
            engine, f"{socket.gethostname()}-{os.getpid()}", settings.scrape_interval_seconds
        )
    else:
        coordinator = SingleCoordinator()
    # Start-up objects (catalog, app, routes) live as long as the process: move them out of the collector's
    # generations so a full collection does not pause admission reviews for ~100 ms.
    gc.collect()
    gc.freeze()
    tasks = [asyncio.create_task(_every(settings.catalog_refresh_seconds, refresh, "catalog refresh"))]
    if settings.scrape_enabled:
        tasks.append(
            asyncio.create_task(run_live_loop(app, live, coordinator, settings.scrape_interval_seconds))
        )
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await coordinator.close()
        await live.aclose()
        await engine.dispose()


def create_app(settings: Settings | None = None, *, with_lifespan: bool = True) -> FastAPI:
    """Build the app. Tests pass ``with_lifespan=False`` and set ``app.state`` themselves."""
    settings = settings or get_settings()
    configure_logging(settings.log_level, settings.log_format)
    app = FastAPI(
        title="kvcap",
        version="0.1.0",
        summary="Capacity planner for LLM serving with vLLM",
        lifespan=lifespan if with_lifespan else None,
        docs_url=None,  # served from local assets by install_offline_docs, not from a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.admission_observer = admission_metrics
    app.state.plan_cache = PlanCache()
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_request_body_bytes)
    app.add_middleware(RefuseControlCharacters)
    install_offline_docs(app)
    app.include_router(health_router)
    app.include_router(catalog_router)
    app.include_router(planning_router)
    app.include_router(deployments_router)
    app.include_router(admission_router)
    app.include_router(metrics_router)
    return app
