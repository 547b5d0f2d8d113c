"""The live loop in a worker process: snapshots handed over, a dead worker replaced, nothing left behind; and a
periodic refresh that finds nothing new re-plans nothing."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogHolder
from service.db import migrate
from service.db.session import create_engine, create_sessionmaker
from service.deployments.orm import DeploymentEntry
from service.deployments.schemas import DeploymentCreate, DeploymentRead
from service.deployments.service import DeploymentsHolder, to_columns
from service.exporter import pipeline
from service.exporter.collector import SelfMetrics, admission_metrics, render_metrics
from service.exporter.exposition import ExpositionCache
from service.exporter.latency import LatencyPredictions
from service.exporter.pipeline import Predictions, record_calibrations
from service.exporter.worker_process import LiveProcess, LiveSnapshot, LiveView, slim, use_process
from service.live.manager import LiveTarget, aggregate
from service.live.parser import parse_vllm_metrics
from service.live.schemas import parse_live_source
from service.live.scraper import TargetResult
from service.planning.calibration import Calibration, CalibrationHolder, calibration_key
from service.planning.calibration_store import KEEP_OBSERVATIONS
from service.planning.step_time_calibration import StepTimeScales, record_step_time
from service.settings import Settings
from tests.live.stub_server import StubServer

KEY = ("llm", "chat")


async def wait_for(condition: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the worker process did not get there in time"
        await asyncio.sleep(0.05)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def seed(database_url: str, body: dict[str, object]) -> None:
    engine = create_engine(database_url)
    try:
        async with create_sessionmaker(engine)() as session:
            data = DeploymentCreate.model_validate(body)
            session.add(DeploymentEntry(namespace=data.namespace, name=data.name, **to_columns(data)))
            await session.commit()
    finally:
        await engine.dispose()


@pytest.fixture
async def stub(vllm_metrics_dir: Path) -> AsyncIterator[StubServer]:
    server = StubServer({"/metrics": (vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_bytes()})
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def worker_settings(tmp_path: Path, stub: StubServer) -> Settings:
    url = f"sqlite+aiosqlite:///{tmp_path / 'live.db'}"
    migrate.upgrade(url)
    await seed(
        url,
        {
            "namespace": "llm",
            "name": "chat",
            "model": "llama-3.1-8b",
            "gpu": "l4",
            "max_model_len": 8192,
            "replicas": 2,
            "live": {"scrape_urls": [stub.url("/metrics")]},
        },
    )
    return Settings(
        database_url=url,
        scrape_interval_seconds=0.2,
        catalog_refresh_seconds=3600,
        scrape_allowed_hosts=["127.0.0.1"],
        log_level="WARNING",
    )


def start_process(
    settings: Settings,
) -> tuple[LiveProcess, LiveView, Predictions, ExpositionCache, LatencyPredictions]:
    view, predictions, exposition, latency = (
        LiveView(),
        Predictions(),
        ExpositionCache(),
        LatencyPredictions(),
    )
    worker = LiveProcess(
        settings,
        view=view,
        deployments=DeploymentsHolder(),
        predictions=predictions,
        latency=latency,
        exposition=exposition,
    )
    worker.start()
    return worker, view, predictions, exposition, latency


async def test_the_worker_process_scrapes_plans_and_hands_back_a_snapshot_and_the_rendered_fleet(
    worker_settings: Settings, stub: StubServer
) -> None:
    worker, view, predictions, exposition, latency = start_process(worker_settings)
    try:
        await wait_for(lambda: KEY in view.observations and KEY in predictions.capacities)
        assert worker.pid is not None and worker.pid != os.getpid()
    finally:
        await worker.stop()  # no more hand-overs: what follows reads one snapshot
    observation = view.observations[KEY]
    assert observation.replicas == 1 and observation.num_gpu_blocks == 8192  # the fixture's cache_config_info
    assert observation.targets_up == {stub.url("/metrics"): True}
    assert predictions.capacities[KEY].replicas == 2
    assert view.last_refresh_timestamp_s is not None and view.deployments_tracked == 1
    body = exposition.render(
        predictions.capacities,
        view.observations,
        SelfMetrics.of(view),
        admission_metrics,
        latency=latency.latency,
    )
    assert exposition.renders == 0  # the fleet came rendered: this process rendered none of it
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    blocks = families["kvcap_observed_kv_cache_blocks"].samples
    assert [(s.labels, s.value) for s in blocks] == [({"namespace": "llm", "deployment": "chat"}, 8192.0)]
    assert families["kvcap_live_worker_restarts"].samples[0].value == 0
    assert stub.requests  # the process did scrape the stub


async def test_a_worker_process_that_dies_is_replaced_logged_and_counted(
    worker_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    worker, view, *_ = start_process(worker_settings)
    try:
        await wait_for(lambda: KEY in view.observations)
        first = worker.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await wait_for(lambda: view.worker_restarts == 1 and worker.pid not in (None, first))
        handed = worker.snapshots
        await wait_for(lambda: worker.snapshots > handed)  # the new process publishes again
        assert SelfMetrics.of(view).worker_restarts == 1
    finally:
        await worker.stop()
    assert any("exited with code -9" in r.getMessage() for r in caplog.records)


async def test_stopping_leaves_no_process_behind(worker_settings: Settings) -> None:
    worker, view, *_ = start_process(worker_settings)
    await wait_for(lambda: KEY in view.observations)
    pid = worker.pid
    assert pid is not None
    await worker.stop()
    assert not worker.is_alive()
    assert gone(pid)
    assert not [p for p in multiprocessing.active_children() if p.name == "kvcap-live-worker"]


def test_process_is_the_default_where_the_database_can_be_shared() -> None:
    assert use_process(Settings(database_url="sqlite+aiosqlite:////tmp/kvcap.db"))
    assert use_process(Settings(database_url="postgresql+psycopg://kvcap@db/kvcap"))
    assert not use_process(Settings(database_url="sqlite+aiosqlite://"))  # in-memory: one process only
    assert not use_process(Settings(database_url="sqlite+aiosqlite:////tmp/kvcap.db", live_worker="thread"))


def test_the_snapshot_pickles_without_the_pods_histograms(vllm_metrics_dir: Path) -> None:
    metrics = parse_vllm_metrics((vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_text())
    url = "http://10.0.0.5:8000/metrics"
    target = LiveTarget(namespace="llm", name="chat", source=parse_live_source({"scrape_urls": [url]}))
    result = TargetResult(url=url, ok=True, reason=None, duration_s=0.01, metrics=metrics, pod="chat-0")
    full = aggregate(target, [result], observed_at_s=1.0, duration_s=0.01, errors_total={"timeout": 2})
    assert full.pods[0].histograms and full.pods[0].cache_config
    light = slim(full)
    assert not light.pods[0].histograms and light.pods[0].cache_config is None
    snapshot = LiveSnapshot(
        capacities={},
        observations={KEY: light},
        latency={},
        order=(),
        blocks={},
        last_refresh_timestamp_s=1.0,
        last_refresh_duration_s=0.5,
    )
    back = pickle.loads(pickle.dumps(snapshot))
    assert back.observations[KEY].errors_total == {"timeout": 2}
    assert back.observations[KEY].latency == full.latency
    # Everything /metrics shows of the deployment is the same from the light copy.
    assert render_metrics({}, {KEY: back.observations[KEY]}) == render_metrics({}, {KEY: full})


def deployment(**changes: object) -> DeploymentRead:
    fields: dict[str, object] = {
        "namespace": "llm",
        "name": "chat",
        "model": "llama-3.1-8b",
        "gpu": "l4",
        "max_model_len": 8192,
        "replicas": 1,
        "version": 1,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    return DeploymentRead.model_validate(fields | changes)


async def test_a_step_time_reload_that_finds_nothing_new_keeps_its_generation(
    session: AsyncSession, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    scales = StepTimeScales()
    await scales.reload(sessionmaker)
    await scales.reload(sessionmaker)
    assert scales.generation == 0  # every periodic refresh used to bump it, re-planning every deployment
    plan = pipeline.deployment_plan(builtin_snapshot(), deployment()).plan
    assert await record_step_time(session, plan, source="llm/chat", observation={"time_scale": 1.2})
    await session.commit()
    await scales.reload(sessionmaker)
    await scales.reload(sessionmaker)
    assert scales.generation == 1


async def test_a_calibration_of_another_configuration_does_not_re_plan_this_deployment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    planned: list[str] = []
    real = pipeline.deployment_plan

    def counting(*args: object, **kwargs: object) -> object:
        planned.append(args[1].name)  # type: ignore[attr-defined]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "deployment_plan", counting)
    catalog, calibrations, predictions = CatalogHolder(builtin_snapshot()), CalibrationHolder(), Predictions()
    fleet = [deployment(name="chat"), deployment(name="long", max_model_len=4096)]
    predictions.update(catalog, fleet, calibrations)
    capacities = predictions.capacities
    planned.clear()
    long_key = calibration_key(predictions.uncalibrated(("llm", "long")))  # type: ignore[arg-type]
    calibrations.by_key = {long_key: Calibration(observed_num_gpu_blocks=1000, samples=1, updated_at=None)}
    calibrations.generation += 1  # what a reload that read a new observation does
    predictions.update(catalog, fleet, calibrations)
    assert planned == ["long", "long"]  # calibrated and uncalibrated plans of that configuration only
    assert predictions.capacities[("llm", "long")].num_gpu_blocks == 1000
    planned.clear()
    predictions.update(catalog, fleet, calibrations)
    assert planned == []
    assert predictions.capacities is not capacities


async def test_replicas_already_offered_to_the_calibration_store_are_not_offered_again(
    vllm_metrics_dir: Path, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    """More replicas of one configuration than the store keeps: without the memory of what was offered, every
    tick rotated the kept observations, so every calibration reload saw a change and re-planned."""
    metrics = parse_vllm_metrics((vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_text())
    pods = KEEP_OBSERVATIONS + 5
    urls = [f"http://10.0.0.{i}:8000/metrics" for i in range(pods)]
    target = LiveTarget(namespace="llm", name="chat", source=parse_live_source({"scrape_urls": urls}))
    results = [
        TargetResult(url=u, ok=True, reason=None, duration_s=0.01, metrics=metrics, pod=f"chat-{i}")
        for i, u in enumerate(urls)
    ]
    observations = {KEY: aggregate(target, results, observed_at_s=1.0, duration_s=0.01)}
    predictions = Predictions()
    # The fixture is vLLM's CPU build (block_size 128): registered as such, so its replicas count.
    predictions.update(CatalogHolder(builtin_snapshot()), [deployment(block_size=128)], CalibrationHolder())
    assert predictions.uncalibrated(KEY) is not None
    offered: set[tuple[str, str, int]] = set()
    assert await record_calibrations(sessionmaker, observations, predictions, offered) == pods
    assert len(offered) == pods
    calibrations = CalibrationHolder()
    await calibrations.reload(sessionmaker)
    generation = calibrations.generation
    for _ in range(3):  # the next ticks see the same replicas reporting the same counts
        assert await record_calibrations(sessionmaker, observations, predictions, offered) == 0
        await calibrations.reload(sessionmaker)
    assert calibrations.generation == generation
    # Without the memory the store would have been written again (the first replicas rotated out).
    assert await record_calibrations(sessionmaker, observations, predictions) > 0


async def test_the_server_answers_the_same_with_the_loop_in_a_process_as_on_a_thread(
    worker_settings: Settings, stub: StubServer
) -> None:
    """The real lifespan both ways: ``/v1/live/deployments`` and the per-deployment ``/metrics`` series agree
    (save the times of the refresh itself), and the process way leaves no process behind."""
    import gc

    import httpx

    from service.app import create_app

    async def served(
        mode: str,
    ) -> tuple[dict[str, object], dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
        app = create_app(worker_settings.model_copy(update={"live_worker": mode}))
        try:
            async with (
                app.router.lifespan_context(app),
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
            ):
                assert type(app.state.live_worker).__name__ == (
                    "LiveProcess" if mode == "process" else "LiveWorker"
                )

                async def observed() -> dict[str, object]:
                    return (await client.get("/v1/live/deployments")).json()  # type: ignore[no-any-return]

                deadline = time.monotonic() + 60
                live = await observed()
                while not (live["items"] and live["items"][0].get("observed_replicas")):  # type: ignore[index]
                    assert time.monotonic() < deadline, "no observation in time"
                    await asyncio.sleep(0.1)
                    live = await observed()
                text = (await client.get("/metrics")).text
                pid = getattr(app.state.live_worker, "pid", None)
        finally:
            gc.unfreeze()  # the lifespan froze the test process's objects; hand them back to the collector
        if pid is not None:
            assert gone(pid)
        series = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if "deployment" in s.labels and s.name != "kvcap_scrape_duration_seconds"
        }
        return live, series

    in_process, process_series = await served("process")
    on_thread, thread_series = await served("thread")
    for answer in (in_process, on_thread):
        answer["last_refresh_timestamp_seconds"] = None
        for item in answer["items"]:  # type: ignore[attr-defined]
            item["observed_at_seconds"] = None
    assert in_process == on_thread
    assert process_series == thread_series
    assert (
        process_series[("kvcap_observed_kv_cache_blocks", (("deployment", "chat"), ("namespace", "llm")))]
        == 8192
    )
