"""The live loop runs on a thread of its own and hands its results over as snapshots; unchanged inputs cost
no re-planning and no cache invalidation."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogHolder, read_snapshot
from service.deployments.schemas import DeploymentRead
from service.deployments.service import DeploymentsHolder
from service.exporter import pipeline
from service.exporter.pipeline import LiveWorker, Predictions
from service.live.manager import LiveManager
from service.planning.calibration import CalibrationHolder
from service.planning.calibration_store import record_observation
from service.planning.schemas import PlanRequestBody
from service.planning.service import make_plan
from service.settings import Settings

MiB = 1024 * 1024
KEY = ("llm", "chat")


def deployment(**changes: object) -> DeploymentRead:
    fields: dict[str, object] = {
        "namespace": "llm",
        "name": "chat",
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm-80gb",
        "max_model_len": 8192,
        "replicas": 2,
        "live": {"scrape_urls": ["http://pod-a:8000/metrics"]},
        "version": 1,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    return DeploymentRead.model_validate(fields | changes)


async def wait_for(condition: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the worker did not get there in time"
        await asyncio.sleep(0.02)


async def test_the_worker_scrapes_and_plans_on_its_own_thread_and_publishes_snapshots(
    vllm_metrics_dir: Path, tmp_path: Path
) -> None:
    body = (vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_bytes()
    scraped_on: set[int] = set()

    def handler(request: httpx.Request) -> httpx.Response:
        scraped_on.add(threading.get_ident())
        return httpx.Response(200, content=body)

    live = LiveManager(
        client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
        guard=None,
        timeout_s=5,
        max_bytes=4 * MiB,
        concurrency=4,
        owns_client=True,
    )
    predictions = Predictions()
    worker = LiveWorker(
        Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'worker.db'}",
            scrape_interval_seconds=0.05,
            catalog_refresh_seconds=3600,
        ),
        deployments=DeploymentsHolder([deployment()]),
        catalog=CatalogHolder(builtin_snapshot()),
        calibrations=CalibrationHolder(),
        predictions=predictions,
        live=live,
    )
    worker.start()
    try:
        await wait_for(lambda: worker.ticks >= 2 and KEY in live.observations)
    finally:
        await worker.stop()
    assert scraped_on and threading.get_ident() not in scraped_on
    assert scraped_on == {worker.thread_id}
    observation = live.observations[KEY]
    assert observation.replicas == 1 and observation.num_gpu_blocks == 8192  # the fixture's cache_config_info
    assert predictions.capacities[KEY].replicas == 2
    assert not worker.is_alive()


async def test_unchanged_inputs_are_not_planned_again(monkeypatch: pytest.MonkeyPatch) -> None:
    planned: list[str] = []
    real = pipeline.deployment_plan

    def counting(*args: object, **kwargs: object) -> object:
        planned.append("x")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "deployment_plan", counting)
    predictions = Predictions()
    catalog, calibrations = CatalogHolder(builtin_snapshot()), CalibrationHolder()
    predictions.update(catalog, [deployment()], calibrations)
    first = len(planned)
    assert first >= 1
    catalog.replace(builtin_snapshot())  # what a periodic refresh does when nothing changed
    predictions.update(catalog, [deployment()], calibrations)
    assert len(planned) == first
    predictions.update(catalog, [deployment(version=2, replicas=3)], calibrations)
    assert len(planned) > first
    assert predictions.capacities[KEY].replicas == 3


async def test_an_unchanged_catalog_reload_keeps_the_snapshot_and_its_generation(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    async with sessionmaker() as session:
        holder = CatalogHolder(await read_snapshot(session))
    snapshot, generation = holder.snapshot, holder.generation
    await holder.reload(sessionmaker)
    await holder.reload(sessionmaker)
    assert holder.snapshot is snapshot and holder.generation == generation
    holder.replace(builtin_snapshot())  # different content (its source): a real change
    assert holder.generation == generation + 1


async def test_a_calibration_reload_bumps_the_generation_only_when_an_observation_arrived(
    session: AsyncSession, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    holder = CalibrationHolder()
    await holder.reload(sessionmaker)
    await holder.reload(sessionmaker)
    assert holder.generation == 0
    plan = make_plan(
        builtin_snapshot(),
        PlanRequestBody.model_validate({"model": "llama-3.1-8b", "gpu": "l4", "max_model_len": 8192}),
    )
    assert await record_observation(session, plan, observed_num_gpu_blocks=1000, source="llm/chat/pod-a")
    await session.commit()
    await holder.reload(sessionmaker)
    await holder.reload(sessionmaker)
    assert holder.generation == 1
