"""renders: one audio file of a whole job, with captions, built under the render lock

Revision ID: 0013_renders
Revises: 0010_documents
Create Date: 2026-12-04 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from speechbatch.adapters.db import UTCDateTime, db_now

revision = "0013_renders"
down_revision = "0012_webhooks"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "renders",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("organization_id", _ID, nullable=False),
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("created_by_id", _ID, nullable=True),
        sa.Column("lock_id", _ID, nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("format", sa.String(length=10), nullable=False),
        sa.Column("gap_ms", sa.Integer(), nullable=False),
        sa.Column("chapter_gap_ms", sa.Integer(), nullable=False),
        sa.Column("loudness_lufs", sa.Float(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("file_path", sa.String(length=500), nullable=True),
        sa.Column("vtt_path", sa.String(length=500), nullable=True),
        sa.Column("srt_path", sa.String(length=500), nullable=True),
        sa.Column("duration_seconds", sa.Float(), nullable=True),
        sa.Column("chapters", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            UTCDateTime(timezone=True),
            server_default=db_now(),
            nullable=False,
        ),
        sa.Column("finished_at", UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_renders_organization_id_organizations"),
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_renders_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["created_by_id"], ["users.id"], name=op.f("fk_renders_created_by_id_users")
        ),
        sa.ForeignKeyConstraint(
            ["lock_id"], ["job_locks.id"], name=op.f("fk_renders_lock_id_job_locks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_renders")),
    )
    op.create_index("ix_renders_job_id_id", "renders", ["job_id", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_renders_job_id_id", table_name="renders")
    op.drop_table("renders")
