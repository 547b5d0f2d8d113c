"""The FastAPI application: routers, error rendering, limits, and the lifespan that owns engines and tasks."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.admission.manifests import router as checks_router
from service.admission.router import router as admission_router
from service.api.docs import install_offline_docs
from service.api.edge import Edge
from service.api.errors import install_error_handlers
from service.api.health import router as health_router
from service.catalog.builtin import builtin_snapshot
from service.catalog.router import router as catalog_router
from service.catalog.snapshot import CatalogHolder
from service.db.session import create_engine, create_sessionmaker
from service.deployments.router import router as deployments_router
from service.deployments.service import DeploymentsHolder
from service.exporter.collector import admission_metrics
from service.exporter.exposition import ExpositionCache
from service.exporter.latency import LatencyPredictions
from service.exporter.pipeline import LiveWorker, Predictions
from service.exporter.router import router as metrics_router
from service.exporter.service_metrics import ServiceMetrics
from service.exporter.status import router as live_status_router
from service.exporter.worker_process import LiveProcess, LiveView, use_process
from service.live.manager import LiveManager
from service.logs import configure_logging
from service.planning.calibration import CalibrationHolder
from service.planning.lane import PlanLane
from service.planning.router import PlanCache
from service.planning.router import router as planning_router
from service.planning.step_time_calibration import StepTimeScales
from service.settings import Settings, get_settings
from service.ui.router import STATIC as UI_STATIC
from service.ui.router import router as ui_router
from service.version import kvcap_version

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
        app.state.service_metrics.catalog_refreshed()
    except Exception as exc:
        holder.replace(builtin_snapshot())
        holder.last_error = f"{type(exc).__name__}"
        logger.warning(
            "catalog not readable from the database (%s); serving the built-in catalog", type(exc).__name__
        )
        return
    if snapshot.source == "builtin":  # the database's catalog is empty: reload serves the built-in one
        logger.warning(
            "the database catalog is empty (run `kvcap catalog load`); serving the built-in catalog"
        )


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Engine, in-memory catalog/registry/calibrations, the refresh task and the live-metrics loop."""
    settings: Settings = app.state.settings
    engine = create_engine(
        settings.database_url, pool_size=settings.database_pool_size, timeouts=settings.database_timeouts
    )
    app.state.engine = engine
    app.state.sessionmaker = create_sessionmaker(engine)
    logger.info("database %s", make_url(settings.database_url).render_as_string(hide_password=True))
    await start_catalog(app)
    app.state.deployments = DeploymentsHolder()
    app.state.calibrations = CalibrationHolder()
    app.state.step_time_scales = StepTimeScales()
    app.state.latency_predictions = LatencyPredictions()
    for holder in (app.state.deployments, app.state.calibrations, app.state.step_time_scales):
        try:
            await holder.reload(app.state.sessionmaker)
        except Exception as exc:
            logger.warning(
                "%s not readable from the database (%s); starting empty",
                type(holder).__name__,
                type(exc).__name__,
            )

    async def refresh(sessionmaker: async_sessionmaker[AsyncSession] = app.state.sessionmaker) -> None:
        await app.state.catalog.reload(sessionmaker)
        app.state.service_metrics.catalog_refreshed()
        await app.state.deployments.reload(sessionmaker)
        await app.state.calibrations.reload(sessionmaker)
        await app.state.step_time_scales.reload(sessionmaker)

    app.state.predictions = Predictions()
    app.state.exposition = ExpositionCache()
    in_process = settings.scrape_enabled and use_process(settings)
    worker: LiveWorker | LiveProcess
    if in_process:
        # Scraping, parsing and re-planning run in a worker process; this one only swaps in its snapshots.
        app.state.live = view = LiveView()
        live: LiveManager | LiveView = view
        worker = LiveProcess(
            settings,
            view=view,
            deployments=app.state.deployments,
            predictions=app.state.predictions,
            latency=app.state.latency_predictions,
            exposition=app.state.exposition,
        )
    else:
        app.state.live = live = LiveManager.from_settings(settings)
        # KVCAP_LIVE_WORKER=thread: the same loop on a thread with its own event loop.
        worker = LiveWorker(
            settings,
            deployments=app.state.deployments,
            catalog=app.state.catalog,
            calibrations=app.state.calibrations,
            predictions=app.state.predictions,
            live=live,
            refresh=refresh,
            exposition=app.state.exposition,
            scales=app.state.step_time_scales,
            latency=app.state.latency_predictions,
        )
    app.state.live_worker = worker
    # With the loop in a worker process, this process's own periodic reload (catalog, registry, calibrations:
    # validating every row) runs on a thread with its own event loop and engine, not on the serving loop.
    reloader_thread = (
        LiveWorker(
            settings,
            deployments=app.state.deployments,
            catalog=app.state.catalog,
            calibrations=app.state.calibrations,
            predictions=app.state.predictions,
            live=None,
            refresh=refresh,
        )
        if in_process
        else None
    )
    # Start-up objects (catalog, app, routes) live as long as the process: move them out of the collector's
    # generations so a full collection does not pause admission reviews for ~100 ms.
    gc.collect()
    gc.freeze()
    tasks: list[asyncio.Task[None]] = []
    reloader = getattr(app.state, "tls_reloader", None)  # set by `kvcap serve` when it serves HTTPS
    if reloader is not None:
        tasks.append(asyncio.create_task(reloader.watch(settings.tls_reload_interval_seconds)))
    if settings.scrape_enabled:
        worker.start()  # the worker thread runs the periodic refresh as well
    if reloader_thread is not None:
        reloader_thread.start()
    elif not settings.scrape_enabled:
        tasks.append(
            asyncio.create_task(_every(settings.catalog_refresh_seconds, refresh, "catalog refresh"))
        )
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if reloader_thread is not None:
            await reloader_thread.stop()
        if settings.scrape_enabled:
            await worker.stop()  # the worker closes its coordinator, HTTP client and engine itself
        else:
            await live.aclose()
        await engine.dispose()


def create_app(settings: Settings | None = None, *, with_lifespan: bool = True) -> FastAPI:
    """Build the app. Tests pass ``with_lifespan=False`` and set ``app.state`` themselves."""
    settings = settings or get_settings()
    configure_logging(settings.log_level, settings.log_format)
    app = FastAPI(
        title="kvcap",
        version=kvcap_version(),
        summary="Capacity planner for LLM serving with vLLM",
        lifespan=lifespan if with_lifespan else None,
        docs_url=None,  # served from local assets by install_offline_docs, not from a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.admission_observer = admission_metrics
    app.state.service_metrics = service_metrics = ServiceMetrics()
    app.state.plan_cache = PlanCache()
    install_error_handlers(app)
    # Request id, metrics, control characters and the body limit in one callable; plans answered at the edge.
    lanes = {PlanLane.route: PlanLane(app.state)}
    app.add_middleware(Edge, max_bytes=settings.max_request_body_bytes, metrics=service_metrics, lanes=lanes)
    install_offline_docs(app)
    app.include_router(health_router)
    app.include_router(catalog_router)
    app.include_router(planning_router)
    app.include_router(deployments_router)
    app.include_router(admission_router)
    app.include_router(metrics_router)
    app.include_router(checks_router)
    app.include_router(live_status_router)
    app.include_router(ui_router)
    app.mount("/ui/static", StaticFiles(directory=str(UI_STATIC)), name="ui-static")
    return app
