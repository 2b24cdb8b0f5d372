"""reservations: one row per billed provider attempt; months never go negative

A refund flips its reservation by compare-and-set and gives the characters back to the
month that paid, so a retried refund gives back nothing twice and a refund after midnight
on the last day of a month does not take from the next one.

Revision ID: 0009_reservations
Revises: 0008
Create Date: 2026-12-04 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from speechbatch.adapters.db import UTCDateTime, db_now

revision = "0009_reservations"
down_revision = "0008"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("organization_id", _ID, nullable=False),
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("characters", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), server_default=db_now(), nullable=False),
        sa.Column("refunded_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_reservations_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_reservations_organization_id_organizations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reservations")),
    )
    op.create_index(op.f("ix_reservations_job_id"), "reservations", ["job_id"], unique=False)
    with op.batch_alter_table("usage_months") as batch:
        batch.create_check_constraint("billed_characters_not_negative", "billed_characters >= 0")
        batch.create_check_constraint("provider_calls_not_negative", "provider_calls >= 0")


def downgrade() -> None:
    with op.batch_alter_table("usage_months") as batch:
        batch.drop_constraint("provider_calls_not_negative", type_="check")
        batch.drop_constraint("billed_characters_not_negative", type_="check")
    op.drop_index(op.f("ix_reservations_job_id"), table_name="reservations")
    op.drop_table("reservations")
