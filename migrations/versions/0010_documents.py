"""documents: items carry an optional key and chapter; a job's chapters are rows

Revision ID: 0010_documents
Revises: 0009_reservations
Create Date: 2026-12-04 17:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_documents"
down_revision = "0009_reservations"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("items") as batch:
        batch.add_column(sa.Column("key", sa.String(length=100), nullable=True))
        batch.add_column(sa.Column("chapter", sa.Integer(), nullable=True))
    # NULL keys are distinct on both databases: only keyed items must be unique in a job.
    op.create_index("uq_items_job_id_key", "items", ["job_id", "key"], unique=True)
    op.create_table(
        "chapters",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("first_position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_chapters_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chapters")),
        sa.UniqueConstraint("job_id", "index", name="uq_chapters_job_id_index"),
    )


def downgrade() -> None:
    op.drop_table("chapters")
    op.drop_index("uq_items_job_id_key", table_name="items")
    with op.batch_alter_table("items") as batch:
        batch.drop_column("chapter")
        batch.drop_column("key")
