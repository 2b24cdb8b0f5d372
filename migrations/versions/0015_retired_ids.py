"""retired ids: SQLite never gives a deleted job's id to a new job

Revision ID: 0015_retired_ids
Revises: 0014_lexicon
Create Date: 2026-12-04 22:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_retired_ids"
down_revision = "0014_lexicon"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "retired_ids",
        sa.Column("table_name", sa.String(50), primary_key=True),
        sa.Column("last_id", _ID, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("retired_ids")
