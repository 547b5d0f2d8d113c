"""Migrations: one head, a clean upgrade → downgrade → upgrade round trip, and models that match the DDL.

Runs against a throwaway database on the test server (Postgres in CI), never the shared test database.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from service.db.migrate import alembic_config
from service.models import metadata
from service.settings import sync_database_url

TABLES = {"gpus", "models", "deployments", "calibrations", "step_time_calibrations"}


@pytest.fixture
def scratch_url(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not database_url.startswith("postgresql"):
        yield f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('migrations')}/scratch.db"
        return
    name = f"kvcap_migrations_{uuid.uuid4().hex[:10]}"
    admin = create_engine(
        sync_database_url(str(make_url(database_url).set(database="postgres"))), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield str(make_url(database_url).set(database=name))
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_there_is_a_single_head() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1


def test_migration_files_are_named_date_first() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    for revision in script.walk_revisions():
        name = revision.path.rsplit("/", 1)[-1]
        assert name[:4].isdigit() and name[4] == "-", name


def test_upgrade_downgrade_upgrade(scratch_url: str) -> None:
    config = alembic_config(scratch_url)
    engine = create_engine(sync_database_url(scratch_url))
    command.upgrade(config, "head")
    assert set(inspect(engine).get_table_names()) >= TABLES
    command.downgrade(config, "base")
    assert not TABLES & set(inspect(engine).get_table_names())
    command.upgrade(config, "head")
    assert set(inspect(engine).get_table_names()) >= TABLES
    engine.dispose()


def test_models_and_migrations_agree(scratch_url: str) -> None:
    command.upgrade(alembic_config(scratch_url), "head")
    engine = create_engine(sync_database_url(scratch_url))
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, metadata)
    engine.dispose()
    assert diff == []
