"""lexicon: an organization's pronunciation rules and the stale pass after a change

Revision ID: 0014_lexicon
Revises: 0013_renders
Create Date: 2026-12-04 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from speechbatch.adapters.db import UTCDateTime, db_now

revision = "0014_lexicon"
down_revision = "0013_renders"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "lexicons",
        sa.Column("organization_id", _ID, autoincrement=False, nullable=False),
        sa.Column("version", sa.Integer(), server_default="0", nullable=False),
        sa.Column("stale_version", sa.Integer(), server_default="0", nullable=False),
        sa.Column("pass_token", sa.Integer(), server_default="0", nullable=False),
        sa.Column("pass_expires_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column(
            "updated_at", UTCDateTime(timezone=True), server_default=db_now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_lexicons_organization_id_organizations"),
        ),
        sa.PrimaryKeyConstraint("organization_id", name=op.f("pk_lexicons")),
    )
    op.create_table(
        "lexicon_rules",
        sa.Column("organization_id", _ID, autoincrement=False, nullable=False),
        sa.Column("position", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("match", sa.String(length=200), nullable=False),
        sa.Column("say", sa.Text(), nullable=False),
        sa.Column("regex", sa.Boolean(), nullable=False),
        sa.Column("case_sensitive", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_lexicon_rules_organization_id_organizations"),
        ),
        sa.PrimaryKeyConstraint("organization_id", "position", name=op.f("pk_lexicon_rules")),
    )


def downgrade() -> None:
    op.drop_table("lexicon_rules")
    op.drop_table("lexicons")
