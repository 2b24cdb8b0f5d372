"""a cast: items carry an optional speaker; a job maps speakers to voices

Revision ID: 0027
Revises: 0028
Create Date: 2026-12-05 20:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0028"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("items") as batch:
        batch.add_column(sa.Column("speaker", sa.String(length=50), nullable=True))
    op.create_table(
        "cast_voices",
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("speaker", sa.String(length=50), nullable=False),
        sa.Column("voice", sa.String(length=100), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_cast_voices_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "speaker", name=op.f("pk_cast_voices")),
    )


def downgrade() -> None:
    op.drop_table("cast_voices")
    with op.batch_alter_table("items") as batch:
        batch.drop_column("speaker")
