"""spoken texts: each item's spoken text under a lexicon version, kept by the stale pass

The job page, its items and its estimate read what the stale pass computed instead of
applying the rules to every line of a request: ``items.spoken_version`` (the lexicon
version the stored spoken text answers; NULL: not computed yet), ``items.spoken_text``
(NULL: the text itself) and ``items.spoken_error`` (why the rules cannot make one), and
``jobs.spoken_version``, the version all of a job's items answer (NULL: not yet), which
the pass looks for. Existing rows start NULL: the first pass computes them.

Revision ID: 0019
Revises: 0017_run_beats
Create Date: 2026-12-05 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0017_run_beats"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("items") as batch:
        batch.add_column(sa.Column("spoken_version", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("spoken_text", sa.Text(), nullable=True))
        batch.add_column(sa.Column("spoken_error", sa.Text(), nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("spoken_version", sa.Integer(), nullable=True))
    op.create_index(
        "ix_jobs_organization_id_spoken_version", "jobs", ["organization_id", "spoken_version"]
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_organization_id_spoken_version", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("spoken_version")
    with op.batch_alter_table("items") as batch:
        batch.drop_column("spoken_error")
        batch.drop_column("spoken_text")
        batch.drop_column("spoken_version")
