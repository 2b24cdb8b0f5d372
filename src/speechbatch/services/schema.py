"""The database's schema: bring it to the newest migration."""

from __future__ import annotations

from speechbatch.adapters.migrate import upgrade


def upgrade_database(database_url: str) -> None:
    """Apply every Alembic migration the database lacks (idempotent)."""
    upgrade(database_url)
