"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 08:35:47.654876
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import speechbatch.adapters.db

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_locks",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "organization_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("job_type", sa.Text(), nullable=False),
        sa.Column("holder", sa.Text(), nullable=False),
        sa.Column(
            "acquired_at",
            speechbatch.adapters.db.UTCDateTime(timezone=True),
            server_default=speechbatch.adapters.db.db_now(),
            nullable=False,
        ),
        sa.Column("expires_at", speechbatch.adapters.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("released_at", speechbatch.adapters.db.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_locks")),
    )
    with op.batch_alter_table("job_locks", schema=None) as batch_op:
        batch_op.create_index(
            "uq_job_locks_live",
            ["organization_id", "job_type"],
            unique=True,
            postgresql_where=sa.text("released_at IS NULL"),
            sqlite_where=sa.text("released_at IS NULL"),
        )

    op.create_table(
        "organizations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("slug", sa.String(length=100), nullable=False),
        sa.Column(
            "created_at",
            speechbatch.adapters.db.UTCDateTime(timezone=True),
            server_default=speechbatch.adapters.db.db_now(),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_organizations")),
        sa.UniqueConstraint("slug", name=op.f("uq_organizations_slug")),
    )
    op.create_table(
        "workers",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column(
            "started_at",
            speechbatch.adapters.db.UTCDateTime(timezone=True),
            server_default=speechbatch.adapters.db.db_now(),
            nullable=False,
        ),
        sa.Column(
            "heartbeat_at",
            speechbatch.adapters.db.UTCDateTime(timezone=True),
            server_default=speechbatch.adapters.db.db_now(),
            nullable=False,
        ),
        sa.Column("stopped_at", speechbatch.adapters.db.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "organization_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("password_hash", sa.String(length=300), nullable=False),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column(
            "created_at",
            speechbatch.adapters.db.UTCDateTime(timezone=True),
            server_default=speechbatch.adapters.db.db_now(),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_users_organization_id_organizations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("email", name=op.f("uq_users_email")),
    )
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_users_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "api_tokens",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("user_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column(
            "created_at",
            speechbatch.adapters.db.UTCDateTime(timezone=True),
            server_default=speechbatch.adapters.db.db_now(),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_api_tokens_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_tokens_user_id"), ["user_id"], unique=False)

    op.create_table(
        "exports",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "organization_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column(
            "created_by_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("lock_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("file_path", sa.String(length=500), nullable=True),
        sa.Column(
            "created_at",
            speechbatch.adapters.db.UTCDateTime(timezone=True),
            server_default=speechbatch.adapters.db.db_now(),
            nullable=False,
        ),
        sa.Column("finished_at", speechbatch.adapters.db.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["created_by_id"], ["users.id"], name=op.f("fk_exports_created_by_id_users")
        ),
        sa.ForeignKeyConstraint(
            ["lock_id"], ["job_locks.id"], name=op.f("fk_exports_lock_id_job_locks")
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_exports_organization_id_organizations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exports")),
    )
    with op.batch_alter_table("exports", schema=None) as batch_op:
        batch_op.create_index(
            "ix_exports_organization_id_id", ["organization_id", "id"], unique=False
        )

    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "organization_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column(
            "created_by_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("voice", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            speechbatch.adapters.db.UTCDateTime(timezone=True),
            server_default=speechbatch.adapters.db.db_now(),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            speechbatch.adapters.db.UTCDateTime(timezone=True),
            server_default=speechbatch.adapters.db.db_now(),
            nullable=False,
        ),
        sa.Column("started_at", speechbatch.adapters.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("finished_at", speechbatch.adapters.db.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["created_by_id"], ["users.id"], name=op.f("fk_jobs_created_by_id_users")
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_jobs_organization_id_organizations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_organization_id_id", ["organization_id", "id"], unique=False)
        batch_op.create_index("ix_jobs_status", ["status"], unique=False)

    op.create_table(
        "items",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("audio_path", sa.String(length=500), nullable=True),
        sa.Column("audio_bytes", sa.Integer(), nullable=True),
        sa.Column("audio_sha256", sa.String(length=64), nullable=True),
        sa.Column(
            "updated_at",
            speechbatch.adapters.db.UTCDateTime(timezone=True),
            server_default=speechbatch.adapters.db.db_now(),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_items_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_items")),
        sa.UniqueConstraint("job_id", "position", name="uq_items_job_id_position"),
    )
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.create_index("ix_items_job_id_status", ["job_id", "status"], unique=False)
        batch_op.create_index("ix_items_job_id_updated_at", ["job_id", "updated_at"], unique=False)

    op.create_table(
        "runs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column(
            "started_by_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("worker_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column(
            "started_at",
            speechbatch.adapters.db.UTCDateTime(timezone=True),
            server_default=speechbatch.adapters.db.db_now(),
            nullable=False,
        ),
        sa.Column("finished_at", speechbatch.adapters.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_runs_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["started_by_id"], ["users.id"], name=op.f("fk_runs_started_by_id_users")
        ),
        sa.ForeignKeyConstraint(
            ["worker_id"], ["workers.id"], name=op.f("fk_runs_worker_id_workers")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("job_id", "attempt", name="uq_runs_job_id_attempt"),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_worker_id"), ["worker_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_worker_id"))

    op.drop_table("runs")
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.drop_index("ix_items_job_id_updated_at")
        batch_op.drop_index("ix_items_job_id_status")

    op.drop_table("items")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_status")
        batch_op.drop_index("ix_jobs_organization_id_id")

    op.drop_table("jobs")
    with op.batch_alter_table("exports", schema=None) as batch_op:
        batch_op.drop_index("ix_exports_organization_id_id")

    op.drop_table("exports")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_tokens_user_id"))

    op.drop_table("api_tokens")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_users_organization_id"))

    op.drop_table("users")
    op.drop_table("workers")
    op.drop_table("organizations")
    with op.batch_alter_table("job_locks", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_job_locks_live",
            postgresql_where=sa.text("released_at IS NULL"),
            sqlite_where=sa.text("released_at IS NULL"),
        )

    op.drop_table("job_locks")
