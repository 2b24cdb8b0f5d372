"""edits: stale items, quality flags, takes, job options, selective runs

Every audio an item has had is a row of ``takes`` (the audio items have now becomes
their take 1); the job carries its options; an item says whether its audio is stale,
how long it lasts and whether it sounds suspect.

Revision ID: 0011_edits
Revises: 0010_documents
Create Date: 2026-12-04 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from speechbatch.adapters.db import UTCDateTime, db_now

revision = "0011_edits"
down_revision = "0010_documents"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("options", sa.Text(), server_default="{}", nullable=False))
    with op.batch_alter_table("items") as batch:
        batch.add_column(
            sa.Column("stale", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch.add_column(sa.Column("duration_seconds", sa.Float(), nullable=True))
        batch.add_column(sa.Column("suspect", sa.String(length=20), nullable=True))
        batch.add_column(sa.Column("current_take", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("selected_for", sa.Integer(), nullable=True))
    op.create_index(
        "ix_items_job_id_stale",
        "items",
        ["job_id"],
        postgresql_where=sa.text("stale"),
        sqlite_where=sa.text("stale"),
    )
    op.create_index(
        "ix_items_job_id_suspect",
        "items",
        ["job_id"],
        postgresql_where=sa.text("suspect IS NOT NULL"),
        sqlite_where=sa.text("suspect IS NOT NULL"),
    )
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("selected", sa.Integer(), nullable=True))
    op.create_table(
        "takes",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("item_id", _ID, nullable=False),
        sa.Column("take", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("spoken_text", sa.Text(), nullable=False),
        sa.Column("voice", sa.String(length=100), nullable=False),
        sa.Column("options", sa.Text(), server_default="{}", nullable=False),
        sa.Column("audio_path", sa.String(length=500), nullable=False),
        sa.Column("audio_bytes", sa.Integer(), nullable=True),
        sa.Column("audio_sha256", sa.String(length=64), nullable=True),
        sa.Column("fingerprint", sa.String(length=64), nullable=True),
        sa.Column("duration_seconds", sa.Float(), nullable=True),
        sa.Column("suspect", sa.String(length=20), nullable=True),
        sa.Column("reused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("created_at", UTCDateTime(), server_default=db_now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["item_id"], ["items.id"], name=op.f("fk_takes_item_id_items"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_takes")),
        sa.UniqueConstraint("item_id", "take", name="uq_takes_item_id_take"),
    )
    op.create_index("ix_takes_audio_path", "takes", ["audio_path"])
    # The audio items have now is their first take.
    op.execute(
        "INSERT INTO takes (item_id, take, text, spoken_text, voice, options, audio_path,"
        " audio_bytes, audio_sha256, fingerprint, reused, created_at)"
        " SELECT i.id, 1, i.text, i.text, j.voice, '{}', i.audio_path, i.audio_bytes,"
        " i.audio_sha256, i.fingerprint, i.reused, i.updated_at"
        " FROM items i JOIN jobs j ON j.id = i.job_id WHERE i.audio_path IS NOT NULL"
    )
    op.execute("UPDATE items SET current_take = 1 WHERE audio_path IS NOT NULL")


def downgrade() -> None:
    op.drop_index("ix_takes_audio_path", table_name="takes")
    op.drop_table("takes")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("selected")
    op.drop_index("ix_items_job_id_suspect", table_name="items")
    op.drop_index("ix_items_job_id_stale", table_name="items")
    with op.batch_alter_table("items") as batch:
        for column in ("selected_for", "current_take", "suspect", "duration_seconds", "stale"):
            batch.drop_column(column)
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("options")
