"""partial index on items left GENERATING

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 09:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.create_index(
            "ix_items_generating",
            ["job_id"],
            unique=False,
            postgresql_where=sa.text("status = 'GENERATING'"),
            sqlite_where=sa.text("status = 'GENERATING'"),
        )


def downgrade() -> None:
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.drop_index("ix_items_generating")
