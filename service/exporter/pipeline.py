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
   runs, and the observation would teach the wrong lesson).

``GET /metrics`` only renders the latest snapshots; it never waits on a target or the database.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fastapi import FastAPI
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.catalog.snapshot import CatalogHolder, CatalogSnapshot
from service.deployments.schemas import DeploymentPlan, DeploymentRead
from service.deployments.service import deployment_plan
from service.errors import ServiceError
from service.exporter.collector import PredictedCapacity
from service.live.coordination import Coordinator
from service.live.manager import DeploymentKey, DeploymentObservation, LiveManager, LiveTarget
from service.live.schemas import parse_live_source
from service.planning.calibration import CalibrationHolder, record_observation
from service.planning.schemas import PlanResponse

logger = logging.getLogger("kvcap.live")


@dataclass(frozen=True, slots=True)
class _Cached:
    fingerprint: tuple[object, ...]
    plan: DeploymentPlan | None
    uncalibrated: PlanResponse | None
    capacity: PredictedCapacity | None


class Predictions:
    """Plans of owned deployments, recomputed only when their inputs change."""

    def __init__(self) -> None:
        self._cache: dict[DeploymentKey, _Cached] = {}
        self.capacities: Mapping[DeploymentKey, PredictedCapacity] = {}

    def update(
        self, holder: CatalogHolder, deployments: Sequence[DeploymentRead], calibrations: CalibrationHolder
    ) -> None:
        catalog = holder.snapshot
        cache: dict[DeploymentKey, _Cached] = {}
        for deployment in deployments:
            key = (deployment.namespace, deployment.name)
            fingerprint = (
                deployment.version,
                deployment.updated_at,
                holder.generation,
                calibrations.generation,
            )
            cached = self._cache.get(key)
            if cached is None or cached.fingerprint != fingerprint:
                cached = _plan(deployment, catalog, calibrations, fingerprint)
            cache[key] = cached
        self._cache = cache
        self.capacities = {key: c.capacity for key, c in cache.items() if c.capacity is not None}

    def uncalibrated(self, key: DeploymentKey) -> PlanResponse | None:
        cached = self._cache.get(key)
        return cached.uncalibrated if cached else None


def _plan(
    deployment: DeploymentRead,
    catalog: CatalogSnapshot,
    calibrations: CalibrationHolder,
    fingerprint: tuple[object, ...],
) -> _Cached:
    try:
        planned = deployment_plan(catalog, deployment, calibrations)
        uncalibrated = (
            deployment_plan(catalog, deployment).plan
            if planned.plan.calibration and planned.plan.calibration.applied
            else planned.plan
        )
    except (ServiceError, ValidationError, ValueError) as exc:
        logger.warning("cannot plan %s/%s: %s", deployment.namespace, deployment.name, exc)
        return _Cached(fingerprint, None, None, None)
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
    return _Cached(fingerprint, planned, uncalibrated, capacity)


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
) -> int:
    """Store each healthy replica's ``num_gpu_blocks`` for its configuration (see module docstring)."""
    recorded = 0
    async with sessionmaker() as session:
        for key, observation in observations.items():
            plan = predictions.uncalibrated(key)
            if plan is None:
                continue
            for pod in observation.pods:
                if not pod.up or not pod.num_gpu_blocks or not pod.cache_config:
                    continue
                if str(pod.cache_config.get("block_size")) != str(plan.kv_cache.block_size):
                    continue
                per_engine = pod.num_gpu_blocks // max(1, pod.data_parallel_size)
                source = f"{key[0]}/{key[1]}/{pod.pod}"
                recorded += await record_observation(
                    session, plan, observed_num_gpu_blocks=per_engine, source=source
                )
        await session.commit()
    return recorded


async def run_live_loop(app: FastAPI, live: LiveManager, coordinator: Coordinator, interval_s: float) -> None:
    """The loop described in the module docstring; a failed tick is logged and retried on the next one.

    While the database is down nothing here empties the exported set: the registry is the last one read
    (``DeploymentsHolder`` keeps it when a reload fails), and when the coordinator cannot reach the database
    the deployments owned on the last good tick stay owned (``Coordinator.reachable``), so their predicted
    and observed series keep being exported instead of all disappearing at once.
    """
    predictions: Predictions = app.state.predictions
    last_owned: set[str] = set()
    while True:
        started = time.monotonic()
        try:
            deployments = app.state.deployments.deployments
            by_name = {f"{d.namespace}/{d.name}": d for d in deployments}
            owned_names = await coordinator.owned(list(by_name))
            if not coordinator.reachable:
                owned_names = last_owned & set(by_name)
            last_owned = set(owned_names)
            owned = [by_name[name] for name in sorted(owned_names) if name in by_name]
            predictions.update(app.state.catalog, owned, app.state.calibrations)
            await live.refresh(live_targets(owned))
            if await record_calibrations(app.state.sessionmaker, live.observations, predictions):
                await app.state.calibrations.reload(app.state.sessionmaker)
                predictions.update(app.state.catalog, owned, app.state.calibrations)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("live refresh failed: %s: %s", type(exc).__name__, exc)
        await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))
