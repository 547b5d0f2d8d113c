"""Engines and sessions: one async engine per process, one session (unit of work) per request.

The request dependency commits when the handler returns and rolls back when it raises; nothing else calls
``commit()``. Callbacks registered with ``after_commit`` run once the transaction is durable (used to refresh
the in-memory catalog snapshot).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import StaticPool

AfterCommit = Callable[[], Awaitable[None]]

# Execution option a write request sets on its connection before the transaction begins (``begin_write``).
WRITE_TRANSACTION = "kvcap_write_transaction"


def create_engine(url: str, *, pool_size: int = 5, echo: bool = False) -> AsyncEngine:
    kwargs: dict[str, Any] = {"echo": echo}
    if url.startswith("sqlite"):
        if ":memory:" in url or url.rstrip("/").endswith("sqlite+aiosqlite:"):
            kwargs["poolclass"] = StaticPool
        kwargs["connect_args"] = {"timeout": 30}
    else:
        kwargs.update(pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, pool_timeout=10)
        # Fail fast when the server is gone instead of hanging a request (psycopg connect timeout, seconds).
        kwargs["connect_args"] = {"connect_timeout": 5}
    engine = create_async_engine(url, **kwargs)
    if url.startswith("sqlite"):
        _enable_sqlite_foreign_keys(engine.sync_engine)
    return engine


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
