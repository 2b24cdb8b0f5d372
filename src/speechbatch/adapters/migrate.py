"""Apply the Alembic migrations programmatically (``flask db upgrade`` and tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parents[3] / "migrations"


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointing at this project's migrations and the given database."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["database_url"] = database_url
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the database to ``revision`` (idempotent)."""
    command.upgrade(alembic_config(database_url), revision)
