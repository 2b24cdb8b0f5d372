"""take timing: where each sentence (and word) of a take is spoken, as JSON

Revision ID: 0024
Revises: 0027
Create Date: 2026-12-05 20:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("takes") as batch:
        batch.add_column(sa.Column("timing", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("takes") as batch:
        batch.drop_column("timing")
