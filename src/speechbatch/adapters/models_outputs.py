"""The schema of what a job makes and tells: renders of whole jobs, feeds, and webhooks (their
endpoints, the outbox of events, and each event's deliveries)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from speechbatch.adapters.db import Base, Id, UTCDateTime, db_now
from speechbatch.domain.statuses import RenderStatus
from speechbatch.domain.webhooks import DeliveryStatus


class Render(Base):
    """One audio file of a whole job (with captions), built under the ``render:JOB`` lock.

    A COMPLETED render never changes: its file, captions, duration and chapters are
    written once, in the transaction that ends it.
    """

    __tablename__ = "renders"
    __table_args__ = (Index("ix_renders_job_id_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    organization_id: Mapped[int] = mapped_column(Id, ForeignKey("organizations.id"))
    job_id: Mapped[int] = mapped_column(Id, ForeignKey("jobs.id", ondelete="CASCADE"))
    created_by_id: Mapped[int | None] = mapped_column(Id, ForeignKey("users.id"))
    lock_id: Mapped[int | None] = mapped_column(Id, ForeignKey("job_locks.id"))
    status: Mapped[str] = mapped_column(String(20), default=RenderStatus.RUNNING)
    format: Mapped[str] = mapped_column(String(10))
    gap_ms: Mapped[int] = mapped_column(Integer)
    chapter_gap_ms: Mapped[int] = mapped_column(Integer)
    loudness_lufs: Mapped[float | None] = mapped_column(Float)
    error_message: Mapped[str | None] = mapped_column(Text)
    file_path: Mapped[str | None] = mapped_column(String(500))
    vtt_path: Mapped[str | None] = mapped_column(String(500))
    srt_path: Mapped[str | None] = mapped_column(String(500))
    duration_seconds: Mapped[float | None] = mapped_column(Float)
    # [{"title", "start_seconds", "end_seconds"}] as JSON text, written at completion.
    chapters: Mapped[str | None] = mapped_column(Text)
    # acx, podcast, ebu or None; the check report (JSON text) measured on the decoded
    # files; the ZIP of one file per chapter (acx).
    preset: Mapped[str | None] = mapped_column(String(10))
    check_report: Mapped[str | None] = mapped_column(Text)
    zip_path: Mapped[str | None] = mapped_column(String(500))
    # The silence at each paragraph break inside an item (renders made before it: 700).
    paragraph_gap_ms: Mapped[int] = mapped_column(Integer, server_default="700")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class Feed(Base):
    """A job's podcast feed: the SHA-256 of the secret in its URL (the secret itself is
    shown once). One per job; a new one replaces it, deleting it revokes the URL."""

    __tablename__ = "feeds"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    organization_id: Mapped[int] = mapped_column(Id, ForeignKey("organizations.id"))
    job_id: Mapped[int] = mapped_column(Id, ForeignKey("jobs.id", ondelete="CASCADE"), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())


class Webhook(Base):
    """An organization's webhook endpoint: where its events are POSTed, signed with
    ``secret``. ``events`` is the subscribed types between commas (``,job.completed,``),
    so one LIKE finds an event's subscribers."""

    __tablename__ = "webhooks"
    __table_args__ = (Index("ix_webhooks_organization_id_id", "organization_id", "id"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    organization_id: Mapped[int] = mapped_column(Id, ForeignKey("organizations.id"))
    url: Mapped[str] = mapped_column(String(2000))
    events: Mapped[str] = mapped_column(Text)
    description: Mapped[str] = mapped_column(Text, default="")
    secret: Mapped[str] = mapped_column(String(100))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())


class WebhookEvent(Base):
    """The outbox: one row per event, written in the transaction of the change it
    reports. ``body`` is the exact JSON every attempt sends; ``message_id`` is its
    ``webhook-id``."""

    __tablename__ = "webhook_events"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    organization_id: Mapped[int] = mapped_column(Id, ForeignKey("organizations.id"), index=True)
    message_id: Mapped[str] = mapped_column(String(40), unique=True)
    type: Mapped[str] = mapped_column(String(40))
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())


class WebhookDelivery(Base):
    """One event for one webhook, and its attempts. A sender holds it while
    ``lease_expires_at`` is ahead and its worker heartbeats; ``claim_token`` grows with
    every claim and fences the attempt's result. ``schedule_from`` is ``attempts`` at the
    last redeliver: the retry schedule counts from there."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_webhook_id_id", "webhook_id", "id"),
        # The claim scans due deliveries only, and counts the held ones by their lease.
        Index("ix_webhook_deliveries_status_next_attempt_at", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_lease_expires_at", "lease_expires_at"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    event_id: Mapped[int] = mapped_column(
        Id, ForeignKey("webhook_events.id", ondelete="CASCADE"), index=True
    )
    webhook_id: Mapped[int] = mapped_column(Id, ForeignKey("webhooks.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(20), default=DeliveryStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    schedule_from: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), server_default=db_now())
    claim_token: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    claimed_by_id: Mapped[int | None] = mapped_column(Id, ForeignKey("workers.id"))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())


class RetiredId(Base):
    """The highest id a deleted row of a table had. SQLite (without AUTOINCREMENT, which
    an existing table cannot gain in place) gives a new row the largest id + 1: deleting
    the newest job would hand its id, and with it what is cached and stored under that
    id, to the next job of any organization. New jobs there start above this."""

    __tablename__ = "retired_ids"

    table_name: Mapped[str] = mapped_column(String(50), primary_key=True)
    last_id: Mapped[int] = mapped_column(Id)
