"""reservation provider: which provider each billed attempt went to, for the ledger's
breakdown by provider (NULL: before several providers, the default's)

Revision ID: 0026
Revises: 0024
Create Date: 2026-12-05 20:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("reservations") as batch:
        batch.add_column(sa.Column("provider", sa.String(length=20), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("reservations") as batch:
        batch.drop_column("provider")
