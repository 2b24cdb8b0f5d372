"""render paragraph gap: the silence a render puts at each paragraph break inside an item

Revision ID: 0029
Revises: 0026
Create Date: 2026-12-05 23:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Renders made before it are read back with the default they would have had.
    with op.batch_alter_table("renders") as batch:
        batch.add_column(
            sa.Column("paragraph_gap_ms", sa.Integer(), server_default="700", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("renders") as batch:
        batch.drop_column("paragraph_gap_ms")
