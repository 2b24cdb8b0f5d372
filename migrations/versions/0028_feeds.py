"""feeds: a job's podcast feed, found by the SHA-256 of the secret in its URL

Revision ID: 0028
Revises: 0023
Create Date: 2026-12-05 20:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from speechbatch.adapters.db import UTCDateTime, db_now

revision = "0028"
down_revision = "0023"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "feeds",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("organization_id", _ID, nullable=False),
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", UTCDateTime(), server_default=db_now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_feeds_organization_id_organizations"),
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_feeds_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_feeds")),
        sa.UniqueConstraint("job_id", name=op.f("uq_feeds_job_id")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_feeds_token_hash")),
    )


def downgrade() -> None:
    op.drop_table("feeds")
