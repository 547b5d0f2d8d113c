"""Live metrics while the database is down: the exported set keeps the last known deployments.

The live loop runs for real (``run_live_loop``) with a session factory whose every session fails to connect
(a PostgreSQL URL on a port nothing listens on): the registry reload, the calibration write and the
coordinator all fail, and the predicted series of every deployment are still rendered on ``/metrics``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.exc import OperationalError

from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogHolder
from service.db.session import create_engine, create_sessionmaker
from service.deployments.schemas import DeploymentRead
from service.deployments.service import DeploymentsHolder
from service.exporter.collector import AdmissionMetrics, SelfMetrics, render_metrics
from service.exporter.pipeline import Predictions, run_live_loop
from service.live.coordination import Coordinator, PostgresCoordinator
from service.live.guard import TargetGuard
from service.live.manager import LiveManager
from service.live.scraper import make_client
from service.planning.calibration import CalibrationHolder
from tests.live.stub_server import closed_port

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def registered(name: str) -> DeploymentRead:
    return DeploymentRead.model_validate(
        {
            "namespace": "llm",
            "name": name,
            "model": "llama-3.1-8b",
            "gpu": "h100-sxm-80gb",
            "max_model_len": 8192,
            "version": 1,
            "created_at": NOW,
            "updated_at": NOW,
        }
    )


class SwitchableCoordinator(Coordinator):
    """Owns everything while ``up``; answers like ``PostgresCoordinator`` does when the database is down."""

    def __init__(self) -> None:
        self.up = True
        self.asked = asyncio.Event()

    async def owned(self, keys: Sequence[str]) -> set[str]:
        self.asked.set()
        self.reachable = self.up
        return set(keys) if self.up else set()


async def ticks(coordinator: SwitchableCoordinator, count: int) -> None:
    """Wait until the loop has asked the coordinator ``count`` more times (and finished the tick before)."""
    async with asyncio.timeout(30):
        for _ in range(count + 1):
            coordinator.asked.clear()
            await coordinator.asked.wait()


def predicted_deployments(app: SimpleNamespace) -> set[str]:
    body = render_metrics(app.state.predictions.capacities, {}, SelfMetrics(), AdmissionMetrics())
    return {
        sample.labels["deployment"]
        for family in text_string_to_metric_families(body.decode())
        if family.name == "kvcap_predicted_kv_cache_blocks"
        for sample in family.samples
    }


@pytest.fixture
async def down_database() -> SimpleNamespace:
    engine = create_engine(f"postgresql+psycopg://kvcap@127.0.0.1:{closed_port()}/kvcap")
    return SimpleNamespace(engine=engine, sessionmaker=create_sessionmaker(engine))


async def test_live_metrics_keep_the_last_known_deployments_while_the_database_is_down(
    down_database: SimpleNamespace,
) -> None:
    deployments = DeploymentsHolder([registered("chat"), registered("batch")])
    app = SimpleNamespace(
        state=SimpleNamespace(
            catalog=CatalogHolder(builtin_snapshot()),
            deployments=deployments,
            calibrations=CalibrationHolder(),
            predictions=Predictions(),
            sessionmaker=down_database.sessionmaker,
        )
    )
    live = LiveManager(
        client=make_client(concurrency=2),
        guard=TargetGuard([]),
        timeout_s=1.0,
        max_bytes=1 << 20,
        concurrency=2,
        owns_client=True,
    )
    coordinator = SwitchableCoordinator()
    loop = asyncio.create_task(run_live_loop(app, live, coordinator, 0.02))  # type: ignore[arg-type]
    try:
        await ticks(coordinator, 2)
        assert predicted_deployments(app) == {"chat", "batch"}

        coordinator.up = False
        # The registry cannot be re-read either: the holder keeps what it had.
        with pytest.raises(OperationalError):
            await deployments.reload(down_database.sessionmaker)
        await ticks(coordinator, 3)
        assert sorted(d.name for d in deployments.deployments) == ["batch", "chat"]
        assert predicted_deployments(app) == {"chat", "batch"}

        # Back up: ownership comes from the coordinator again (here it gives up "batch").
        coordinator.up = True
        deployments.remove("llm", "batch")
        await ticks(coordinator, 2)
        assert predicted_deployments(app) == {"chat"}
    finally:
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop
        await live.aclose()
        await down_database.engine.dispose()


async def test_the_postgres_coordinator_reports_an_unreachable_database(
    down_database: SimpleNamespace,
) -> None:
    coordinator = PostgresCoordinator(down_database.engine, "replica-a", 1.0)
    try:
        assert coordinator.reachable
        assert await coordinator.owned(["llm/chat"]) == set()
        assert not coordinator.reachable
    finally:
        await coordinator.close()
        await down_database.engine.dispose()
