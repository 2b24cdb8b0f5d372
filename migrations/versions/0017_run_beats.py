"""run beats and in-doubt calls: liveness is the run's, and the ledger says what is in doubt

- ``runs.heartbeat_at``: the process that runs a run stamps it with its heartbeat; a run
  whose beat is older than WORKER_DEAD_SECONDS is dead, whatever its process does. A run
  that was live when this migration ran keeps its worker's last heartbeat as its beat.
- ``reservations.in_doubt_at`` and ``usage_months.in_doubt_calls`` /
  ``in_doubt_characters``: an attempt whose request was written but whose answer was lost
  (a timeout, a reset) stays billed and is counted as in doubt.

Revision ID: 0017_run_beats
Revises: 0016_flag_page_indexes
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from speechbatch.adapters.db import UTCDateTime, db_now

revision = "0017_run_beats"
down_revision = "0016_flag_page_indexes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        runs.add_column(
            sa.Column(
                "heartbeat_at", UTCDateTime(timezone=True), server_default=db_now(), nullable=False
            )
        )
    op.execute(
        "UPDATE runs SET heartbeat_at = COALESCE("
        "(SELECT workers.heartbeat_at FROM workers WHERE workers.id = runs.worker_id), "
        "runs.started_at)"
    )
    with op.batch_alter_table("reservations") as reservations:
        reservations.add_column(sa.Column("in_doubt_at", UTCDateTime(timezone=True)))
    with op.batch_alter_table("usage_months") as months:
        for name in ("in_doubt_calls", "in_doubt_characters"):
            months.add_column(sa.Column(name, sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("usage_months") as months:
        months.drop_column("in_doubt_characters")
        months.drop_column("in_doubt_calls")
    with op.batch_alter_table("reservations") as reservations:
        reservations.drop_column("in_doubt_at")
    with op.batch_alter_table("runs") as runs:
        runs.drop_column("heartbeat_at")
