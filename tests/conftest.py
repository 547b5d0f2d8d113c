"""Shared fixtures: a migrated test database (Postgres when ``KVCAP_TEST_DATABASE_URL`` is set, else a SQLite
file), the built-in catalog loaded once, and per-test isolation by an outer transaction that is rolled back."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import MetaData, create_engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from service.app import create_app
from service.catalog.builtin import load_builtin
from service.catalog.snapshot import CatalogHolder, read_snapshot
from service.db import migrate
from service.db.session import create_engine as create_async_engine
from service.deployments.service import DeploymentsHolder
from service.settings import Settings, normalize_database_url, sync_database_url

DATA = Path(__file__).resolve().parent / "data"


def pytest_report_header() -> str:
    return f"kvcap test database: {_describe(_test_database_url())}"


def _describe(url: str) -> str:
    return "PostgreSQL" if url.startswith("postgresql") else "SQLite"


_SQLITE_DIR = tempfile.mkdtemp(prefix="kvcap-test-")


def _test_database_url() -> str:
    url = os.environ.get("KVCAP_TEST_DATABASE_URL")
    if url:
        return normalize_database_url(url)
    if os.environ.get("KVCAP_REQUIRE_POSTGRES"):
        raise pytest.UsageError("KVCAP_REQUIRE_POSTGRES is set but KVCAP_TEST_DATABASE_URL is not")
    return f"sqlite+aiosqlite:///{_SQLITE_DIR}/test.db"


def reset_database(url: str) -> None:
    """Drop every table so ``alembic upgrade head`` starts from an empty schema."""
    engine = create_engine(sync_database_url(url))
    with engine.begin() as conn:
        meta = MetaData()
        meta.reflect(conn)
        meta.drop_all(conn)
    engine.dispose()


@pytest.fixture(scope="session")
def database_url() -> str:
    return _test_database_url()


@pytest.fixture(scope="session")
def migrated_database(database_url: str) -> str:
    reset_database(database_url)
    migrate.upgrade(database_url)
    return database_url


@pytest.fixture(scope="session")
async def engine(migrated_database: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(migrated_database)
    async with async_sessionmaker(engine)() as session:
        await load_builtin(session)
        await session.commit()
    yield engine
    await engine.dispose()


@pytest.fixture
async def connection(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    async with engine.connect() as conn:
        transaction = await conn.begin()
        try:
            yield conn
        finally:
            await transaction.rollback()


@pytest.fixture
def sessionmaker(connection: AsyncConnection) -> async_sessionmaker[AsyncSession]:
    """Sessions joined to the test's outer transaction: their commits are SAVEPOINT releases."""
    return async_sessionmaker(
        bind=connection, expire_on_commit=False, join_transaction_mode="create_savepoint"
    )


@pytest.fixture
async def session(sessionmaker: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    async with sessionmaker() as session:
        yield session


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url)


async def build_app(
    settings: Settings, engine: AsyncEngine, sessionmaker: async_sessionmaker[AsyncSession]
) -> FastAPI:
    app = create_app(settings, with_lifespan=False)
    app.state.engine = engine
    app.state.sessionmaker = sessionmaker
    async with sessionmaker() as session:
        app.state.catalog = CatalogHolder(await read_snapshot(session))
    app.state.deployments = DeploymentsHolder()
    await app.state.deployments.reload(sessionmaker)
    return app


@pytest.fixture
async def app(
    settings: Settings, engine: AsyncEngine, sessionmaker: async_sessionmaker[AsyncSession]
) -> FastAPI:
    return await build_app(settings, engine, sessionmaker)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        yield client


@pytest.fixture(scope="session")
def vllm_metrics_dir() -> Path:
    """Real vLLM 0.32.0 expositions kept in tests/data (the suite reads nothing outside the repository)."""
    return DATA / "vllm-metrics"
