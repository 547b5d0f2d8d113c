"""Programmatic Alembic: ``kvcap migrate``, the test fixtures and the Helm hook all go through here."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from service.settings import sync_database_url

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "migrations"


def alembic_config(database_url: str) -> Config:
    pyproject = ROOT / "pyproject.toml"
    config = Config(toml_file=str(pyproject)) if pyproject.exists() else Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["sqlalchemy.url"] = sync_database_url(database_url)
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)
