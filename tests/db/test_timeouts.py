"""PostgreSQL sessions carry kvcap's statement and lock timeouts, and they turn into errors the API renders
as 503 (``OperationalError``) instead of waits without end."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncEngine

from service.db.session import DatabaseTimeouts, create_engine
from service.settings import Settings

pytestmark = pytest.mark.postgres

TIMEOUTS = DatabaseTimeouts(statement_seconds=0.5, lock_seconds=0.2)


@pytest.fixture
async def bounded(database_url: str) -> AsyncIterator[AsyncEngine]:
    if not database_url.startswith("postgresql"):
        pytest.skip("PostgreSQL timeouts (set KVCAP_TEST_DATABASE_URL)")
    engine = create_engine(database_url, timeouts=TIMEOUTS)
    yield engine
    await engine.dispose()


async def test_sessions_run_with_the_configured_statement_and_lock_timeouts(bounded: AsyncEngine) -> None:
    async with bounded.connect() as conn:
        assert (await conn.execute(text("SHOW statement_timeout"))).scalar() == "500ms"
        assert (await conn.execute(text("SHOW lock_timeout"))).scalar() == "200ms"


async def test_a_query_longer_than_the_statement_timeout_is_cancelled_by_the_server(
    bounded: AsyncEngine,
) -> None:
    async with bounded.connect() as conn:
        with pytest.raises(OperationalError, match="statement timeout"):
            await conn.execute(text("SELECT pg_sleep(3)"))
    async with bounded.connect() as conn:  # the pool still works
        assert (await conn.execute(text("SELECT 1"))).scalar() == 1


async def test_a_write_queued_behind_a_row_lock_gives_up_after_the_lock_timeout(bounded: AsyncEngine) -> None:
    async with bounded.connect() as holder, bounded.connect() as waiter:
        await holder.execute(text("CREATE TABLE IF NOT EXISTS kvcap_lock_probe (id int PRIMARY KEY)"))
        await holder.execute(text("INSERT INTO kvcap_lock_probe VALUES (1) ON CONFLICT DO NOTHING"))
        await holder.commit()
        try:
            await holder.execute(text("SELECT id FROM kvcap_lock_probe WHERE id = 1 FOR UPDATE"))
            with pytest.raises(OperationalError, match="lock timeout"):
                await waiter.execute(text("UPDATE kvcap_lock_probe SET id = 1 WHERE id = 1"))
            await waiter.rollback()
        finally:
            await holder.rollback()
            await holder.execute(text("DROP TABLE IF EXISTS kvcap_lock_probe"))
            await holder.commit()


def test_the_settings_defaults_bound_a_hung_request_to_a_few_seconds() -> None:
    timeouts = Settings().database_timeouts
    assert timeouts == DatabaseTimeouts()
    # a frozen server: one failed health check, then one connect attempt
    assert timeouts.ping_seconds + timeouts.connect_seconds < 5
    assert timeouts.round_trip_seconds > timeouts.statement_seconds  # the server's own timeout fires first


async def test_a_request_waiting_for_a_free_pooled_connection_gives_up_after_the_pool_timeout(
    database_url: str,
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("PostgreSQL pool (set KVCAP_TEST_DATABASE_URL)")
    engine = create_engine(database_url, pool_size=1, timeouts=DatabaseTimeouts(pool_seconds=0.3))
    try:
        async with engine.connect(), engine.connect():  # the pooled connection and its one overflow
            with pytest.raises(PoolTimeoutError):  # rendered as 503 by service.api.errors
                async with engine.connect():
                    pass
    finally:
        await engine.dispose()
