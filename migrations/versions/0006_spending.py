"""spending: the ledger, budgets, reuse fingerprints, per-run billing, cancel

Revision ID: 0006
Revises: 0004 (re-chained onto 0005, the tokens branch, when it lands)
Create Date: 2026-12-01 03:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0004"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "usage_months",
        sa.Column("id", _ID, nullable=False),
        sa.Column("organization_id", _ID, nullable=False),
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("billed_characters", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("provider_calls", sa.BigInteger(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_usage_months_organization_id_organizations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_months")),
        sa.UniqueConstraint(
            "organization_id", "month", name=op.f("uq_usage_months_organization_id")
        ),
    )
    with op.batch_alter_table("organizations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("budget_characters", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.add_column(sa.Column("fingerprint", sa.String(length=64), nullable=True))
        batch_op.add_column(
            sa.Column("reused", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.create_index(
            "ix_items_fingerprint_updated_at", ["fingerprint", "updated_at"], unique=False
        )
        batch_op.create_index("ix_items_audio_path", ["audio_path"], unique=False)
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("billed_characters", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch_op.add_column(
            sa.Column("provider_calls", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.add_column(sa.Column("cancelled_by_id", _ID, nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_runs_cancelled_by_id_users"), "users", ["cancelled_by_id"], ["id"]
        )


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_runs_cancelled_by_id_users"), type_="foreignkey")
        batch_op.drop_column("cancelled_by_id")
        batch_op.drop_column("provider_calls")
        batch_op.drop_column("billed_characters")
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.drop_index("ix_items_audio_path")
        batch_op.drop_index("ix_items_fingerprint_updated_at")
        batch_op.drop_column("reused")
        batch_op.drop_column("fingerprint")
    with op.batch_alter_table("organizations", schema=None) as batch_op:
        batch_op.drop_column("budget_characters")
    op.drop_table("usage_months")
