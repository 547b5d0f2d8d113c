"""The live loop: which deployments this replica owns, their predictions, their live metrics, calibration.

Every ``KVCAP_SCRAPE_INTERVAL_SECONDS`` one replica:

1. asks the coordinator which registered deployments it owns (all of them on SQLite / one replica; a disjoint
   share per replica on Postgres — see ``service.live.coordination``), so no two replicas export the same
   series;
2. plans each owned deployment (cached until the deployment, the catalog or the calibrations change);
3. reads the live metrics of those with a ``live`` source (``LiveManager.refresh``: bounded concurrency,
   per-target timeouts and size caps, never blocking ``/metrics``);
4. records each healthy replica's reported ``num_gpu_blocks`` as a calibration of its configuration, when the
   block size vLLM reports is the one the plan predicted (otherwise the registration does not describe what
   runs, and the observation would teach the wrong lesson);
5. simulates each observed deployment at the load its latency histograms show, exports predicted next to
   observed latency, and stores the step-time scale fitted from them (``service.exporter.latency``; in a
   worker thread, bounded per refresh).

``GET /metrics`` only renders the latest snapshots; it never waits on a target or the database.

In the server all of this runs in ``LiveWorker``: a thread with its own event loop, HTTP client and database
engine. Scraping (httpx), parsing (prometheus-client's text parser) and re-planning are CPU work; on the event
loop that serves requests they would queue every admission review behind a thousand parses. The worker hands
its results over as immutable snapshots swapped in by one assignment (``LiveManager.observations``,
``Predictions.capacities``), which the serving loop reads without a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from fastapi import FastAPI
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.catalog.snapshot import CatalogHolder, CatalogSnapshot
from service.db.session import create_engine, create_sessionmaker
from service.deployments.schemas import DeploymentRead
from service.deployments.service import DeploymentsHolder, deployment_plan, plan_body
from service.errors import ServiceError
from service.exporter.collector import PredictedCapacity
from service.exporter.exposition import ExpositionCache
from service.exporter.latency import LatencyPredictions, record_step_times
from service.live.coordination import Coordinator, PostgresCoordinator, SingleCoordinator
from service.live.manager import DeploymentKey, DeploymentObservation, LiveManager, LiveTarget
from service.live.schemas import parse_live_source
from service.planning.calibration import Calibration, CalibrationHolder, calibration_key
from service.planning.calibration_store import record_observation
from service.planning.schemas import PlanResponse
from service.planning.service import make_plan
from service.planning.step_time_calibration import StepTimeScale, StepTimeScales
from service.settings import Settings

logger = logging.getLogger("kvcap.live")


@dataclass(frozen=True, slots=True)
class _Cached:
    fingerprint: tuple[object, ...]
    """The deployment's version and update time and the catalog generation the plan was made under."""
    deployment: DeploymentRead
    catalog: CatalogSnapshot
    capacity: PredictedCapacity | None
    configuration: str | None = None
    """The plan's calibration key: the one calibration and step-time scale the plan depends on."""
    block_size: int | None = None
    """The block size the plan predicts (an observation with another one does not calibrate it)."""
    calibration: Calibration | None = None
    scale: StepTimeScale | None = None


class Predictions:
    """Plans of owned deployments, recomputed only when their own inputs change.

    A plan depends on the deployment, the catalog, and the calibration and step-time scale of its own
    configuration (``calibration_key``); a calibration recorded for one configuration re-plans the deployments
    of that configuration only, not the fleet. Only what the loop reads later is kept per deployment: the
    exported capacity, the configuration's key and block size; the uncalibrated plan (what a calibration is
    recorded against, ~17 KiB of objects) is made again on the rare tick that records one.
    """

    def __init__(self) -> None:
        self._cache: dict[DeploymentKey, _Cached] = {}
        self.capacities: Mapping[DeploymentKey, PredictedCapacity] = {}
        self.planned = 0
        """Plans computed so far (cache misses), for tests and diagnostics."""

    def update(
        self,
        holder: CatalogHolder,
        deployments: Sequence[DeploymentRead],
        calibrations: CalibrationHolder,
        scales: StepTimeScales | None = None,
    ) -> None:
        catalog = holder.snapshot
        cache: dict[DeploymentKey, _Cached] = {}
        changed = False
        for deployment in deployments:
            key = (deployment.namespace, deployment.name)
            fingerprint = (deployment.version, deployment.updated_at, holder.generation)
            cached = self._cache.get(key)
            if cached is None or not _still_valid(cached, fingerprint, calibrations, scales):
                cached = _plan(deployment, catalog, calibrations, fingerprint, scales)
                self.planned += 1
                changed = True
            cache[key] = cached
        if not changed and cache.keys() == self._cache.keys():
            return  # the same plans: keep the published mapping (readers key rendered output on its identity)
        self._cache = cache
        self.capacities = {key: c.capacity for key, c in cache.items() if c.capacity is not None}

    def uncalibrated(self, key: DeploymentKey) -> PlanResponse | None:
        """The deployment's plan without calibration (planned again: it is not kept)."""
        cached = self._cache.get(key)
        if cached is None or cached.capacity is None:
            return None
        try:
            return make_plan(cached.catalog, plan_body(cached.deployment))
        except (ServiceError, ValidationError, ValueError):
            return None

    def configuration(self, key: DeploymentKey) -> tuple[str, int] | None:
        """The deployment's calibration key and predicted block size (None when it could not be planned)."""
        cached = self._cache.get(key)
        if cached is None or cached.configuration is None or cached.block_size is None:
            return None
        return cached.configuration, cached.block_size


def _still_valid(
    cached: _Cached,
    fingerprint: tuple[object, ...],
    calibrations: CalibrationHolder,
    scales: StepTimeScales | None,
) -> bool:
    if cached.fingerprint != fingerprint:
        return False
    if cached.configuration is None:  # the deployment could not be planned: no calibration applies to it
        return True
    scale = scales.by_key.get(cached.configuration) if scales is not None else None
    return calibrations.by_key.get(cached.configuration) == cached.calibration and scale == cached.scale


def _plan(
    deployment: DeploymentRead,
    catalog: CatalogSnapshot,
    calibrations: CalibrationHolder,
    fingerprint: tuple[object, ...],
    scales: StepTimeScales | None = None,
) -> _Cached:
    try:
        planned = deployment_plan(catalog, deployment, calibrations, scales)
        uncalibrated = (
            deployment_plan(catalog, deployment).plan
            if planned.plan.calibration and planned.plan.calibration.applied
            else planned.plan
        )
    except (ServiceError, ValidationError, ValueError) as exc:
        logger.warning("cannot plan %s/%s: %s", deployment.namespace, deployment.name, exc)
        return _Cached(fingerprint, deployment, catalog, None)
    kv = planned.plan.kv_cache
    recommended = (
        planned.recommendation.recommended.replicas
        if planned.recommendation and planned.recommendation.recommended
        else None
    )
    capacity = PredictedCapacity(
        num_gpu_blocks=kv.num_gpu_blocks,
        num_gpu_blocks_uncalibrated=uncalibrated.kv_cache.num_gpu_blocks,
        kv_cache_size_tokens=kv.kv_cache_size_tokens,
        max_concurrency=kv.max_concurrency,
        max_num_seqs=planned.plan.settings.max_num_seqs,
        recommended_replicas=recommended,
        replicas=deployment.replicas,
    )
    configuration = calibration_key(uncalibrated)
    return _Cached(
        fingerprint,
        deployment,
        catalog,
        capacity,
        configuration=configuration,
        block_size=uncalibrated.kv_cache.block_size,
        calibration=calibrations.by_key.get(configuration),
        scale=scales.by_key.get(configuration) if scales is not None else None,
    )


def live_targets(deployments: Sequence[DeploymentRead]) -> list[LiveTarget]:
    targets = []
    for deployment in deployments:
        if deployment.live is None:
            continue
        try:
            source = parse_live_source(deployment.live.model_dump())
        except ValidationError:
            continue
        targets.append(LiveTarget(namespace=deployment.namespace, name=deployment.name, source=source))
    return targets


async def record_calibrations(
    sessionmaker: async_sessionmaker[AsyncSession],
    observations: Mapping[DeploymentKey, DeploymentObservation],
    predictions: Predictions,
    offered: set[tuple[str, str, int]] | None = None,
) -> int:
    """Store each healthy replica's ``num_gpu_blocks`` for its configuration (see module docstring).

    ``offered`` (kept by the caller across ticks) holds the (replica, configuration, blocks) already offered
    to the store: a replica that keeps reporting the same count is not offered again. Without it, a
    configuration run by more replicas than the store keeps (``KEEP_OBSERVATIONS``) would rotate its kept
    observations on every tick, bump the calibration generation each time and re-plan those deployments.
    """
    recorded = 0
    current: set[tuple[str, str, int]] = set()
    async with sessionmaker() as session:
        for key, observation in observations.items():
            known = predictions.configuration(key)
            if known is None:
                continue
            configuration, block_size = known
            plan: PlanResponse | None = None
            for pod in observation.pods:
                if not pod.up or not pod.num_gpu_blocks or not pod.cache_config:
                    continue
                if str(pod.cache_config.get("block_size")) != str(block_size):
                    continue
                per_engine = pod.num_gpu_blocks // max(1, pod.data_parallel_size)
                source = f"{key[0]}/{key[1]}/{pod.pod}"
                seen = (source, configuration, per_engine)
                current.add(seen)
                if offered is not None and seen in offered:
                    continue
                plan = plan or predictions.uncalibrated(key)
                if plan is None:
                    break
                recorded += await record_observation(
                    session, plan, observed_num_gpu_blocks=per_engine, source=source
                )
        await session.commit()
    if offered is not None:  # only after the commit: a failed write is offered again on the next tick
        offered.clear()
        offered.update(current)
    return recorded


async def refresh_latency(
    *,
    latency: LatencyPredictions | None,
    scales: StepTimeScales | None,
    catalog: CatalogHolder,
    owned: Sequence[DeploymentRead],
    observations: Mapping[DeploymentKey, DeploymentObservation],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """Step 5 of the loop: predictions in a worker thread, then the fits stored and the scales reloaded."""
    if latency is None or scales is None:
        return
    fits = await asyncio.to_thread(latency.update, catalog.snapshot, owned, observations, scales)
    if await record_step_times(sessionmaker, fits):
        await scales.reload(sessionmaker)


async def live_tick(
    *,
    deployments: DeploymentsHolder,
    catalog: CatalogHolder,
    calibrations: CalibrationHolder,
    predictions: Predictions,
    live: LiveManager,
    coordinator: Coordinator,
    sessionmaker: async_sessionmaker[AsyncSession],
    scales: StepTimeScales | None = None,
    latency: LatencyPredictions | None = None,
    last_owned: set[str] | None = None,
    offered: set[tuple[str, str, int]] | None = None,
) -> None:
    """One pass of the loop described in the module docstring.

    While the database is down nothing here empties the exported set: the registry is the last one read
    (``DeploymentsHolder`` keeps it when a reload fails), and when the coordinator cannot reach the database
    the deployments owned on the last good tick (``last_owned``, kept by the caller across ticks) stay owned
    (``Coordinator.reachable``), so their predicted and observed series keep being exported instead of all
    disappearing at once. ``offered`` (also kept across ticks) is ``record_calibrations``' memory.
    """
    registered = deployments.deployments
    by_name = {f"{d.namespace}/{d.name}": d for d in registered}
    owned_names = await coordinator.owned(list(by_name))
    if last_owned is not None:
        if not coordinator.reachable:
            owned_names = last_owned & set(by_name)
        last_owned.clear()
        last_owned.update(owned_names)
    owned = [by_name[name] for name in sorted(owned_names) if name in by_name]
    predictions.update(catalog, owned, calibrations, scales)
    await live.refresh(live_targets(owned))
    if await record_calibrations(sessionmaker, live.observations, predictions, offered):
        await calibrations.reload(sessionmaker)
        predictions.update(catalog, owned, calibrations, scales)
    await refresh_latency(
        latency=latency,
        scales=scales,
        catalog=catalog,
        owned=owned,
        observations=live.observations,
        sessionmaker=sessionmaker,
    )


async def run_live_loop(app: FastAPI, live: LiveManager, coordinator: Coordinator, interval_s: float) -> None:
    """The loop on the caller's event loop; a failed tick is logged and retried on the next one.

    The server runs it in a ``LiveWorker`` instead; this form suits a caller that has no serving loop to keep free.
    """
    last_owned: set[str] = set()
    offered: set[tuple[str, str, int]] = set()
    while True:
        started = time.monotonic()
        try:
            await live_tick(
                deployments=app.state.deployments,
                catalog=app.state.catalog,
                calibrations=app.state.calibrations,
                predictions=app.state.predictions,
                live=live,
                coordinator=coordinator,
                sessionmaker=app.state.sessionmaker,
                scales=getattr(app.state, "step_time_scales", None),
                latency=getattr(app.state, "latency_predictions", None),
                last_owned=last_owned,
                offered=offered,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("live refresh failed: %s: %s", type(exc).__name__, exc)
        await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))


Refresh = Callable[[async_sessionmaker[AsyncSession]], Awaitable[None]]

# While the worker parses, the serving thread waits for the GIL up to the switch interval (5 ms by default) each
# time it wakes; 1 ms keeps that wait well inside an admission review's budget at a negligible switching cost.
WORKER_SWITCH_INTERVAL_S = 0.001


class LiveWorker:
    """The live loop on a thread of its own, with its own event loop, database engine and coordinator.

    It reads the holders the serving loop keeps current (each holds an immutable snapshot replaced by one
    assignment, so reading one from this thread is safe) and publishes through ``live.observations`` and
    ``predictions.capacities`` the same way. ``live`` (its HTTP client) is used by this thread only.

    ``refresh`` (reloading the catalog, registry and calibrations every ``KVCAP_CATALOG_REFRESH_SECONDS`` to see
    other replicas' writes) runs here too, with this thread's engine: validating a thousand rows is CPU work the
    serving loop should not do either. With ``live=None`` the thread runs only that reload (the live loop is in
    the worker process, ``service.exporter.worker_process``).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        deployments: DeploymentsHolder,
        catalog: CatalogHolder,
        calibrations: CalibrationHolder,
        predictions: Predictions,
        live: LiveManager | None,
        refresh: Refresh | None = None,
        exposition: ExpositionCache | None = None,
        scales: StepTimeScales | None = None,
        latency: LatencyPredictions | None = None,
    ) -> None:
        self._settings = settings
        self._scales = scales
        self._latency = latency
        self._refresh = refresh
        self._exposition = exposition
        self._deployments = deployments
        self._catalog = catalog
        self._calibrations = calibrations
        self._predictions = predictions
        self._live = live
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="kvcap-live", daemon=True)
        self.ticks = 0
        """Completed passes (failed ones included), for tests and diagnostics."""
        self.thread_id: int | None = None

    def start(self) -> None:
        if sys.getswitchinterval() > WORKER_SWITCH_INTERVAL_S:
            sys.setswitchinterval(WORKER_SWITCH_INTERVAL_S)
        self._thread.start()
        self._started.wait(timeout=10)

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel the loop, release its connections and wait for the thread (without blocking the caller's loop)."""
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop finished in the meantime
                loop.call_soon_threadsafe(task.cancel)
        await asyncio.to_thread(self._thread.join, timeout_s)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _main(self) -> None:
        self.thread_id = threading.get_ident()
        asyncio.run(self._run())

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._started.set()
        settings = self._settings
        engine = create_engine(settings.database_url, pool_size=2)
        coordinator: Coordinator | None = None
        if self._live is None:  # only the periodic reload (the live loop runs in the worker process)
            pass
        elif settings.database_url.startswith("postgresql"):
            coordinator = PostgresCoordinator(
                engine, f"{socket.gethostname()}-{os.getpid()}", settings.scrape_interval_seconds
            )
        else:
            coordinator = SingleCoordinator()
        sessionmaker = create_sessionmaker(engine)
        jobs = []
        if coordinator is not None:
            jobs.append(asyncio.create_task(self._loop_forever(coordinator, sessionmaker)))
        if self._refresh is not None:
            jobs.append(asyncio.create_task(self._refresh_forever(self._refresh, sessionmaker)))
        try:
            await asyncio.gather(*jobs)
        except asyncio.CancelledError:
            for job in jobs:
                job.cancel()
            await asyncio.gather(*jobs, return_exceptions=True)
        finally:
            closes: list[Callable[[], Awaitable[None]]] = [engine.dispose]
            if self._live is not None:
                closes.insert(0, self._live.aclose)
            if coordinator is not None:
                closes.insert(0, coordinator.close)
            for close in closes:
                try:
                    await close()
                except Exception as exc:
                    logger.warning("closing the live worker: %s: %s", type(exc).__name__, exc)

    async def _refresh_forever(
        self, refresh: Refresh, sessionmaker: async_sessionmaker[AsyncSession]
    ) -> None:
        while True:
            await asyncio.sleep(self._settings.catalog_refresh_seconds)
            try:
                await refresh(sessionmaker)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("catalog refresh failed: %s", type(exc).__name__)

    async def _loop_forever(
        self, coordinator: Coordinator, sessionmaker: async_sessionmaker[AsyncSession]
    ) -> None:
        live = self._live
        assert live is not None
        interval_s = self._settings.scrape_interval_seconds
        last_owned: set[str] = set()
        offered: set[tuple[str, str, int]] = set()
        while True:
            started = time.monotonic()
            try:
                await live_tick(
                    deployments=self._deployments,
                    catalog=self._catalog,
                    calibrations=self._calibrations,
                    predictions=self._predictions,
                    live=live,
                    coordinator=coordinator,
                    sessionmaker=sessionmaker,
                    scales=self._scales,
                    latency=self._latency,
                    last_owned=last_owned,
                    offered=offered,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("live refresh failed: %s: %s", type(exc).__name__, exc)
            if self._exposition is not None:  # render /metrics for this snapshot now, not in the next scrape
                try:
                    self._exposition.prepare(
                        self._predictions.capacities,
                        live.observations,
                        self._latency.latency if self._latency is not None else None,
                    )
                except Exception as exc:
                    logger.warning("rendering /metrics failed: %s: %s", type(exc).__name__, exc)
            self.ticks += 1
            await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))
