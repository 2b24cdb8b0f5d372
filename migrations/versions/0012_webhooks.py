"""webhooks: endpoints per organization, the outbox of their events, and deliveries

Revision ID: 0012_webhooks
Revises: 0010_documents
Create Date: 2026-12-04 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from speechbatch.adapters.db import UTCDateTime, db_now

revision = "0012_webhooks"
down_revision = "0011_edits"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("organization_id", _ID, nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("events", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("secret", sa.String(length=100), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(), server_default=db_now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_webhooks_organization_id_organizations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
    )
    op.create_index("ix_webhooks_organization_id_id", "webhooks", ["organization_id", "id"])
    op.create_table(
        "webhook_events",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("organization_id", _ID, nullable=False),
        sa.Column("message_id", sa.String(length=40), nullable=False),
        sa.Column("type", sa.String(length=40), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), server_default=db_now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_webhook_events_organization_id_organizations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_events")),
        sa.UniqueConstraint("message_id", name=op.f("uq_webhook_events_message_id")),
    )
    op.create_index(
        op.f("ix_webhook_events_organization_id"), "webhook_events", ["organization_id"]
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("event_id", _ID, nullable=False),
        sa.Column("webhook_id", _ID, nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("schedule_from", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_attempt_at", UTCDateTime(), server_default=db_now()),
        sa.Column("claim_token", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("claimed_by_id", _ID, nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), server_default=db_now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["webhook_events.id"],
            name=op.f("fk_webhook_deliveries_event_id_webhook_events"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhooks.id"],
            name=op.f("fk_webhook_deliveries_webhook_id_webhooks"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["claimed_by_id"],
            ["workers.id"],
            name=op.f("fk_webhook_deliveries_claimed_by_id_workers"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index(op.f("ix_webhook_deliveries_event_id"), "webhook_deliveries", ["event_id"])
    op.create_index(
        "ix_webhook_deliveries_webhook_id_id", "webhook_deliveries", ["webhook_id", "id"]
    )
    op.create_index(
        "ix_webhook_deliveries_status_next_attempt_at",
        "webhook_deliveries",
        ["status", "next_attempt_at"],
    )
    op.create_index(
        "ix_webhook_deliveries_lease_expires_at", "webhook_deliveries", ["lease_expires_at"]
    )


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_index(op.f("ix_webhook_events_organization_id"), table_name="webhook_events")
    op.drop_table("webhook_events")
    op.drop_index("ix_webhooks_organization_id_id", table_name="webhooks")
    op.drop_table("webhooks")
