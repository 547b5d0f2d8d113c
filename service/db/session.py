"""Engines and sessions: one async engine per process, one session (unit of work) per request.

The request dependency commits when the handler returns and rolls back when it raises; nothing else calls
``commit()``. Callbacks registered with ``after_commit`` run once the transaction is durable (used to refresh
the in-memory catalog snapshot).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import StaticPool

AfterCommit = Callable[[], Awaitable[None]]

# Execution option a write request sets on its connection before the transaction begins (``begin_write``).
WRITE_TRANSACTION = "kvcap_write_transaction"


@dataclass(frozen=True, slots=True, kw_only=True)
class DatabaseTimeouts:
    """Bounds on every way a PostgreSQL request can wait, so an unreachable or frozen server costs a request
    a few seconds and a 503, never a hang.

    * ``connect_seconds``: libpq ``connect_timeout`` (libpq rounds values below 2 s up to 2 s).
    * ``statement_seconds`` / ``lock_seconds``: the server's own ``statement_timeout`` and ``lock_timeout``
      (``options=-c …`` at connect), so a slow query or a write queued behind a row lock is cancelled by
      PostgreSQL itself, with a clean error and a connection that stays usable.
    * ``ping_seconds``: the health check of a pooled connection before each use (replacing SQLAlchemy's
      ``pool_pre_ping``, whose ``SELECT 1`` waits without limit on a server that accepts packets but never
      answers, e.g. a SIGSTOPped or partitioned one: the kernel keeps acknowledging, so TCP timeouts never
      fire).
    * ``pool_seconds``: how long a request waits for a free pooled connection.
    * every other round trip waits at most ``statement_seconds + ROUND_TRIP_MARGIN_SECONDS`` on the client
      side: a server that answers reports its ``statement_timeout`` first; one that does not is given up on
      and the connection closed.
    """

    connect_seconds: float = 2.0
    statement_seconds: float = 5.0
    lock_seconds: float = 2.0
    ping_seconds: float = 1.5
    pool_seconds: float = 3.0

    @property
    def round_trip_seconds(self) -> float:
        return self.statement_seconds + ROUND_TRIP_MARGIN_SECONDS

    def server_options(self) -> str:
        """libpq ``options``: session settings applied at connect (PostgreSQL, "Client Connection Defaults")."""
        return (
            f"-c statement_timeout={round(self.statement_seconds * 1000)} "
            f"-c lock_timeout={round(self.lock_seconds * 1000)}"
        )


ROUND_TRIP_MARGIN_SECONDS = 2.0


def bounded_connection_class(round_trip_seconds: float) -> type[psycopg.AsyncConnection[Any]]:
    """A psycopg ``AsyncConnection`` whose every wait on the server ends after ``round_trip_seconds``.

    ``AsyncConnection.wait`` is where psycopg waits for each query's answer (``psycopg/connection_async.py``,
    3.2+: its ``timeout`` raises ``_WaitTimeout``). When it expires the connection's state is unknown (a query
    may be half-sent), so it is closed at once (``pgconn.finish()``: no cancel request, which would wait on
    the same silent server) and the caller gets an ``OperationalError``; SQLAlchemy sees a closed connection
    (``is_disconnect``) and invalidates the pool.
    """

    class BoundedAsyncConnection(psycopg.AsyncConnection[Any]):
        wait_limit_seconds: float | None = None
        """A tighter limit for the next round trip (the pool's health check sets it)."""

        async def wait(
            self,
            gen: Any,
            interval: float = 0.1,
            timeout: float | None = None,  # noqa: ASYNC109 - psycopg's own signature, overridden
        ) -> Any:
            limit = timeout if timeout is not None else (self.wait_limit_seconds or round_trip_seconds)
            started = time.monotonic()
            try:
                return await super().wait(gen, interval=interval, timeout=limit)
            except psycopg.OperationalError as exc:
                if self.pgconn.status == psycopg.pq.ConnStatus.BAD or time.monotonic() - started < limit:
                    raise
                self.pgconn.finish()
                raise psycopg.OperationalError(
                    f"the database did not answer within {limit:g} s; connection closed"
                ) from exc

    return BoundedAsyncConnection


def create_engine(
    url: str, *, pool_size: int = 5, timeouts: DatabaseTimeouts | None = None, echo: bool = False
) -> AsyncEngine:
    kwargs: dict[str, Any] = {"echo": echo}
    if url.startswith("sqlite"):
        if ":memory:" in url or url.rstrip("/").endswith("sqlite+aiosqlite:"):
            kwargs["poolclass"] = StaticPool
        kwargs["connect_args"] = {"timeout": 30}
    else:
        timeouts = timeouts or DatabaseTimeouts()
        kwargs.update(pool_size=pool_size, max_overflow=pool_size, pool_timeout=timeouts.pool_seconds)
        kwargs["connect_args"] = {
            "connect_timeout": max(2, math.ceil(timeouts.connect_seconds)),
            "options": timeouts.server_options(),
            "async_creator_fn": bounded_connection_class(timeouts.round_trip_seconds).connect,
        }
    engine = create_async_engine(url, **kwargs)
    if url.startswith("sqlite"):
        _enable_sqlite_foreign_keys(engine.sync_engine)
    else:
        _ping_on_checkout(engine.sync_engine, timeouts or DatabaseTimeouts())
    return engine


def _ping_on_checkout(engine: Engine, timeouts: DatabaseTimeouts) -> None:
    """SQLAlchemy's "pessimistic disconnect handling" recipe with a time limit: a pooled connection that does
    not answer a ping within ``ping_seconds`` is discarded (``DisconnectionError`` makes the pool connect
    afresh, once, within ``connect_seconds``) instead of holding the request up."""

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        driver = dbapi_connection.driver_connection
        driver.wait_limit_seconds = timeouts.ping_seconds
        try:
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute("SELECT 1")
            finally:
                cursor.close()
        except psycopg.Error as exc:
            raise DisconnectionError(f"pooled connection failed its health check: {exc}") from exc
        finally:
            driver.wait_limit_seconds = None


def _enable_sqlite_foreign_keys(engine: Engine) -> None:
    """Foreign keys on, and SQLAlchemy (not the driver) in charge of BEGIN so SAVEPOINTs work.

    The driver's implicit transaction handling breaks nested transactions; this is SQLAlchemy's documented
    recipe for pysqlite/aiosqlite ("Serializable isolation / Savepoints / Transactional DDL").
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A write takes SQLite's write lock up front: two deferred transactions that both read and then write
        # would make the second fail with "database is locked" (a 503) the moment it tries to upgrade its
        # lock. Under BEGIN IMMEDIATE it waits (the busy timeout) and then reads the first one's committed row,
        # as a row lock does on PostgreSQL: a lost race is a 412 for a stale If-Match, never a 503.
        immediate = conn.get_execution_options().get(WRITE_TRANSACTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


async def begin_write(session: AsyncSession) -> None:
    """Start the session's transaction as a write (``BEGIN IMMEDIATE`` on SQLite; nothing else elsewhere)."""
    bind = session.bind
    if bind is not None and bind.dialect.name == "sqlite" and not session.in_transaction():
        await session.connection(execution_options={WRITE_TRANSACTION: True})


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def after_commit(session: AsyncSession, callback: AfterCommit) -> None:
    """Run ``callback`` after the request's transaction commits (never if it rolls back)."""
    session.info.setdefault("after_commit", []).append(callback)


async def unit_of_work(session: AsyncSession) -> AsyncIterator[AsyncSession]:
    """Yield ``session``; commit on success, roll back on error, then run the after-commit callbacks."""
    try:
        yield session
    except BaseException:
        await session.rollback()
        raise
    else:
        await session.commit()
        callbacks: list[AfterCommit] = session.info.pop("after_commit", [])
        for callback in callbacks:
            await callback()
