"""lexicon impacts: dry runs of unsaved rules, counted in the background in chunks

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-06 02:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from speechbatch.adapters.db import UTCDateTime, db_now

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "lexicon_impacts",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("organization_id", _ID, nullable=False),
        sa.Column("rules", sa.Text(), nullable=False),
        sa.Column("lexicon_version", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), server_default="pending", nullable=False),
        sa.Column("lease_token", sa.Integer(), server_default="0", nullable=False),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("after_job", _ID, server_default="0", nullable=False),
        sa.Column("after_position", sa.Integer(), server_default="-1", nullable=False),
        sa.Column("counted_job", _ID, server_default="0", nullable=False),
        sa.Column("lines", sa.Integer(), server_default="0", nullable=False),
        sa.Column("jobs", sa.Integer(), server_default="0", nullable=False),
        sa.Column("checked", sa.Integer(), server_default="0", nullable=False),
        sa.Column("total", sa.Integer(), nullable=True),
        sa.Column("created_at", UTCDateTime(), server_default=db_now(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_lexicon_impacts_organization_id_organizations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lexicon_impacts")),
    )
    op.create_index(
        "ix_lexicon_impacts_organization_id_id", "lexicon_impacts", ["organization_id", "id"]
    )
    op.create_index("ix_lexicon_impacts_status", "lexicon_impacts", ["status"])


def downgrade() -> None:
    op.drop_index("ix_lexicon_impacts_status", table_name="lexicon_impacts")
    op.drop_index("ix_lexicon_impacts_organization_id_id", table_name="lexicon_impacts")
    op.drop_table("lexicon_impacts")
