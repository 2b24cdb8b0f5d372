"""progress counters and a version on the job row

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 03:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

COUNTERS = {
    "items_pending": "PENDING",
    "items_generating": "GENERATING",
    "items_done": "DONE",
    "items_error": "ERROR",
}


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        for column in (*COUNTERS, "version"):
            batch_op.add_column(sa.Column(column, sa.Integer(), server_default="0", nullable=False))
    # Backfill from the items themselves (a one-off count; never again on the read path).
    assignments = ", ".join(
        f"{column} = (SELECT count(*) FROM items"
        f" WHERE items.job_id = jobs.id AND items.status = '{status}')"
        for column, status in COUNTERS.items()
    )
    op.execute(f"UPDATE jobs SET {assignments}, version = 1")


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        for column in ("version", *reversed(COUNTERS)):
            batch_op.drop_column(column)
