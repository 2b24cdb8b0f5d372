"""API tokens get a name, a prefix, last use and revocation; sign-in throttling

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 03:30:00

Written after 0003 on the tokens branch; merged into the one chain between 0004 (job
counters) and 0006 (spending, which now revises this one), so 0007 (provider slots,
after 0006) keeps a single head.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import speechbatch.adapters.db

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("name", sa.String(length=100), server_default="", nullable=False)
        )
        batch_op.add_column(
            sa.Column("prefix", sa.String(length=16), server_default="", nullable=False)
        )
        batch_op.add_column(
            sa.Column(
                "last_used_at", speechbatch.adapters.db.UTCDateTime(timezone=True), nullable=True
            )
        )
        batch_op.add_column(
            sa.Column(
                "revoked_at", speechbatch.adapters.db.UTCDateTime(timezone=True), nullable=True
            )
        )
    op.create_table(
        "sign_in_throttles",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("client_address", sa.String(length=64), nullable=False),
        sa.Column(
            "window_started_at", speechbatch.adapters.db.UTCDateTime(timezone=True), nullable=False
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sign_in_throttles")),
        sa.UniqueConstraint("email", "client_address", name="uq_sign_in_throttles_email_address"),
    )


def downgrade() -> None:
    op.drop_table("sign_in_throttles")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_column("revoked_at")
        batch_op.drop_column("last_used_at")
        batch_op.drop_column("prefix")
        batch_op.drop_column("name")
