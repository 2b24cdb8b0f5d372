"""The database's schema: migrate it up or down, and check it against the models."""

from __future__ import annotations

from speechbatch.adapters.migrate import (
    SchemaState,
    Step,
    downgrade,
    schema_differences,
    schema_state,
    upgrade,
)

__all__ = [
    "SchemaState",
    "Step",
    "check_database",
    "downgrade_database",
    "upgrade_database",
]


def upgrade_database(database_url: str) -> list[Step]:
    """Apply every Alembic migration the database lacks (idempotent); what was applied."""
    return upgrade(database_url)


def downgrade_database(database_url: str, revision: str) -> list[Step]:
    """Revert the migrations newer than ``revision``; what was reverted, newest first."""
    return downgrade(database_url, revision)


def check_database(database_url: str) -> tuple[SchemaState, list[str]]:
    """Where the database stands, and how its schema differs from the models (one line
    per difference; none when the database is at the head and agrees with the models)."""
    state = schema_state(database_url)
    if state.current != state.head:
        return state, []
    return state, schema_differences(database_url)
