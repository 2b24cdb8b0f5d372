"""browser sessions: a session is a row the server can end (sign-out, sign out everywhere)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 18:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from speechbatch.adapters.db import UTCDateTime, db_now

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "browser_sessions",
        sa.Column("id", _ID, nullable=False),
        sa.Column("user_id", _ID, nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", UTCDateTime(), server_default=db_now(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_browser_sessions_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_browser_sessions")),
        sa.UniqueConstraint("secret_hash", name=op.f("uq_browser_sessions_secret_hash")),
    )
    with op.batch_alter_table("browser_sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_browser_sessions_user_id"), ["user_id"])
        batch_op.create_index(batch_op.f("ix_browser_sessions_expires_at"), ["expires_at"])


def downgrade() -> None:
    op.drop_table("browser_sessions")
