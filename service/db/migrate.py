"""Programmatic Alembic: ``kvcap migrate``, the test fixtures and the Helm hook all go through here.

The migration scripts live inside the package (``service/migrations``), so an installed wheel finds them next
to this module; a checkout's ``pyproject.toml`` adds ``[tool.alembic]`` (the revision file-name template) for
``alembic revision`` and friends.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from service.settings import sync_database_url

MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"
ROOT = MIGRATIONS.parents[1]
"""The checkout (or, installed, site-packages: no ``pyproject.toml`` there)."""


def alembic_config(database_url: str) -> Config:
    pyproject = ROOT / "pyproject.toml"
    config = Config(toml_file=str(pyproject)) if (pyproject.exists() and _is_kvcap(pyproject)) else Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["sqlalchemy.url"] = sync_database_url(database_url)
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


def _is_kvcap(pyproject: Path) -> bool:
    """Only kvcap's own ``pyproject.toml`` configures Alembic (not one that happens to sit above an install)."""
    return 'name = "kvcap"' in pyproject.read_text(errors="replace")
