"""render metadata: a job's author and cover; a render's preset, check report and
per-chapter ZIP

Revision ID: 0023
Revises: 0021
Create Date: 2026-12-05 17:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("author", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("cover_path", sa.String(length=500), nullable=True))
    with op.batch_alter_table("renders") as batch:
        batch.add_column(sa.Column("preset", sa.String(length=10), nullable=True))
        batch.add_column(sa.Column("check_report", sa.Text(), nullable=True))
        batch.add_column(sa.Column("zip_path", sa.String(length=500), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("renders") as batch:
        batch.drop_column("zip_path")
        batch.drop_column("check_report")
        batch.drop_column("preset")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("cover_path")
        batch.drop_column("author")
