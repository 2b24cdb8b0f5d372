"""provider slots and pace shared by the deployment; waiting counts on runs

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 03:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from speechbatch.adapters.db import UTCDateTime, db_now

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "provider_slots",
        sa.Column("slot", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("token", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column("worker_id", _ID, nullable=False),
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("acquired_at", UTCDateTime(), server_default=db_now(), nullable=False),
        sa.Column("released_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["worker_id"], ["workers.id"], name=op.f("fk_provider_slots_worker_id_workers")
        ),
        sa.PrimaryKeyConstraint("slot", name=op.f("pk_provider_slots")),
    )
    op.create_index(op.f("ix_provider_slots_job_id"), "provider_slots", ["job_id"], unique=False)
    op.create_table(
        "provider_pace",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("next_start_at", UTCDateTime(), server_default=db_now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_provider_pace")),
    )
    op.execute("INSERT INTO provider_pace (id) VALUES (1)")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("waiting_for_slot", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.add_column(
            sa.Column("waiting_for_pace", sa.Integer(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("waiting_for_pace")
        batch_op.drop_column("waiting_for_slot")
    op.drop_table("provider_pace")
    op.drop_index(op.f("ix_provider_slots_job_id"), table_name="provider_slots")
    op.drop_table("provider_slots")
