"""flag page indexes: the stale and suspect items of a job in position order

A page of a job's flagged items is read in position order: with the position in the
partial index, the page reads its rows in order and stops at its limit, instead of
reading every flagged row of the job and sorting them.

Revision ID: 0016_flag_page_indexes
Revises: 0015_retired_ids
Create Date: 2026-12-05 00:55:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_flag_page_indexes"
down_revision = "0015_retired_ids"
branch_labels = None
depends_on = None

_FLAGS = {"stale": "stale", "suspect": "suspect IS NOT NULL"}


def _recreate(columns: list[str]) -> None:
    for flag, condition in _FLAGS.items():
        name = f"ix_items_job_id_{flag}"
        op.drop_index(name, table_name="items")
        op.create_index(
            name,
            "items",
            columns,
            postgresql_where=sa.text(condition),
            sqlite_where=sa.text(condition),
        )


def upgrade() -> None:
    _recreate(["job_id", "position"])


def downgrade() -> None:
    _recreate(["job_id"])
