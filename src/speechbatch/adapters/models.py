"""The schema, as typed SQLAlchemy models. Migrations in ``migrations/`` must match it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from speechbatch.adapters.db import Base, Id, UTCDateTime, db_now

# Chapters, renders, webhooks, the lexicon, idempotency keys and browser sessions live in
# modules of their own; importing them here registers their tables with every reader of
# this schema.
from speechbatch.adapters.models_documents import CastVoice, Chapter
from speechbatch.adapters.models_keys import IdempotencyKey
from speechbatch.adapters.models_lexicon import Lexicon, LexiconImpact, LexiconRule
from speechbatch.adapters.models_outputs import (
    Feed,
    Render,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
)
from speechbatch.adapters.models_sessions import BrowserSession
from speechbatch.adapters.models_spending import (
    ProviderPace,
    ProviderSlot,
    Reservation,
    UsageMonth,
)
from speechbatch.domain.statuses import (
    ExportStatus,
    ItemStatus,
    JobStatus,
    RunOutcome,
)

__all__ = [
    "BrowserSession",
    "CastVoice",
    "Chapter",
    "ExportStatus",
    "Feed",
    "IdempotencyKey",
    "ItemStatus",
    "JobStatus",
    "Lexicon",
    "LexiconImpact",
    "LexiconRule",
    "ProviderPace",
    "ProviderSlot",
    "Render",
    "Reservation",
    "RunOutcome",
    "UsageMonth",
    "Webhook",
    "WebhookDelivery",
    "WebhookEvent",
]


class Organization(Base):
    __tablename__ = "organizations"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    slug: Mapped[str] = mapped_column(String(100), unique=True)
    # Monthly budget of billed characters; None means no limit.
    budget_characters: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    organization_id: Mapped[int] = mapped_column(Id, ForeignKey("organizations.id"), index=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    password_hash: Mapped[str] = mapped_column(String(300))
    is_admin: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    user_id: Mapped[int] = mapped_column(Id, ForeignKey("users.id"), index=True)
    # Only the SHA-256 of the token is stored; the token itself is shown once.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    name: Mapped[str] = mapped_column(String(100), server_default="")
    # The token's first characters, so a person can tell their tokens apart.
    prefix: Mapped[str] = mapped_column(String(16), server_default="")
    # Written at most once a minute, not on every request.
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class SignInThrottle(Base):
    """Sign-in attempts of one email from one client address in the current window."""

    __tablename__ = "sign_in_throttles"
    __table_args__ = (
        UniqueConstraint("email", "client_address", name="uq_sign_in_throttles_email_address"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    email: Mapped[str] = mapped_column(String(320))
    client_address: Mapped[str] = mapped_column(String(64))
    window_started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    attempts: Mapped[int] = mapped_column(Integer)


class Worker(Base):
    """One row per process start: a respawned process is a new worker."""

    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_organization_id_id", "organization_id", "id"),
        # Recovery scans only live jobs.
        Index("ix_jobs_status", "status"),
        # The stale pass finds the jobs whose spoken texts answer another lexicon version.
        Index("ix_jobs_organization_id_spoken_version", "organization_id", "spoken_version"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    organization_id: Mapped[int] = mapped_column(Id, ForeignKey("organizations.id"))
    created_by_id: Mapped[int | None] = mapped_column(Id, ForeignKey("users.id"))
    title: Mapped[str] = mapped_column(String(200))
    voice: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20), default=JobStatus.PENDING)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Progress counters, kept by the same fenced statements that move the items, so
    # that summaries never count items. Their sum is the number of items.
    items_pending: Mapped[int] = mapped_column(Integer, server_default="0")
    items_generating: Mapped[int] = mapped_column(Integer, server_default="0")
    items_done: Mapped[int] = mapped_column(Integer, server_default="0")
    items_error: Mapped[int] = mapped_column(Integer, server_default="0")
    # Bumped by every write that changes what the job's API answers show: the ETag.
    version: Mapped[int] = mapped_column(Integer, server_default="0")
    # The job's options (speed, instructions) as a JSON object: part of what is asked.
    options: Mapped[str] = mapped_column(Text, server_default="{}")
    # The lexicon version every item's spoken text and stale mark answer (None: not yet).
    spoken_version: Mapped[int | None] = mapped_column(Integer)
    author: Mapped[str | None] = mapped_column(String(200))
    cover_path: Mapped[str | None] = mapped_column(String(500))  # its storage key


class Item(Base):
    __tablename__ = "items"
    __table_args__ = (
        UniqueConstraint("job_id", "position", name="uq_items_job_id_position"),
        # Progress counts per job are an index-only scan.
        Index("ix_items_job_id_status", "job_id", "status"),
        # The newest progress signal of a job is one index probe, however many items.
        Index("ix_items_job_id_updated_at", "job_id", "updated_at"),
        # Orphan items (GENERATING after their job ended) are found without scanning
        # every item of an organization.
        Index(
            "ix_items_generating",
            "job_id",
            postgresql_where=text("status = 'GENERATING'"),
            sqlite_where=text("status = 'GENERATING'"),
        ),
        # Reuse: the newest audio of a fingerprint is one index probe, however much audio
        # an organization has (the fingerprint carries the organization).
        Index("ix_items_fingerprint_updated_at", "fingerprint", "updated_at"),
        # Shared audio: whether anything still refers to a file is one index probe.
        Index("ix_items_audio_path", "audio_path"),
        # NULL keys are distinct on both databases: only keyed items are unique in a job.
        Index("uq_items_job_id_key", "job_id", "key", unique=True),
        # Stale and suspect filters and counts probe only the flagged items of a job
        # (a page of them in position order reads its rows in order, up to its limit).
        Index(
            "ix_items_job_id_stale",
            "job_id",
            "position",
            postgresql_where=text("stale"),
            sqlite_where=text("stale"),
        ),
        Index(
            "ix_items_job_id_suspect",
            "job_id",
            "position",
            postgresql_where=text("suspect IS NOT NULL"),
            sqlite_where=text("suspect IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    job_id: Mapped[int] = mapped_column(Id, ForeignKey("jobs.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20), default=ItemStatus.PENDING)
    error_message: Mapped[str | None] = mapped_column(Text)
    audio_path: Mapped[str | None] = mapped_column(String(500))
    audio_bytes: Mapped[int | None] = mapped_column(Integer)
    audio_sha256: Mapped[str | None] = mapped_column(String(64))
    # What the provider was (or would be) asked: see fingerprints.audio_fingerprint.
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    # The audio was shared from an earlier item instead of paying for a call.
    reused: Mapped[bool] = mapped_column(Boolean, server_default=false())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    # The caller's name for the item (export file names), and its chapter's index.
    key: Mapped[str | None] = mapped_column(String(100))
    chapter: Mapped[int | None] = mapped_column(Integer)
    # Who says the line (the job's cast gives the voice); None: the narrator.
    speaker: Mapped[str | None] = mapped_column(String(50))
    # The current audio no longer matches what would be sent now (an edit, the voice,
    # the options or the lexicon changed since it was made).
    stale: Mapped[bool] = mapped_column(Boolean, server_default=false())
    # The current audio's measured duration and quality verdict (see domain.quality).
    duration_seconds: Mapped[float | None] = mapped_column(Float)
    suspect: Mapped[str | None] = mapped_column(String(20))
    # The number of the item's take that its audio is (see Take).
    current_take: Mapped[int | None] = mapped_column(Integer)
    # The attempt of the selective regenerate that picked this item, if any.
    selected_for: Mapped[int | None] = mapped_column(Integer)
    # Its spoken text under lexicon version ``spoken_version`` (None: not computed yet),
    # written by the stale pass: ``spoken_text`` when it is not the text itself, or
    # ``spoken_error`` when the rules cannot make one within bounds (too long).
    spoken_version: Mapped[int | None] = mapped_column(Integer)
    spoken_text: Mapped[str | None] = mapped_column(Text)
    spoken_error: Mapped[str | None] = mapped_column(Text)


class Run(Base):
    """One row per attempt of a job: who started it, where it ran, how it ended."""

    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("job_id", "attempt", name="uq_runs_job_id_attempt"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    job_id: Mapped[int] = mapped_column(Id, ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20), default="generate")
    started_by_id: Mapped[int | None] = mapped_column(Id, ForeignKey("users.id"))
    worker_id: Mapped[int | None] = mapped_column(Id, ForeignKey("workers.id"), index=True)
    outcome: Mapped[str] = mapped_column(String(20), default=RunOutcome.RUNNING)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    error_message: Mapped[str | None] = mapped_column(Text)
    # The run's share of the ledger: every provider attempt, recorded before it is sent.
    # What the run billed before reservations were rows (migration 0009); a later run's
    # share of the ledger is its reservations' rows, so these stay 0 for it.
    billed_characters: Mapped[int] = mapped_column(BigInteger, server_default="0")
    provider_calls: Mapped[int] = mapped_column(Integer, server_default="0")
    cancelled_by_id: Mapped[int | None] = mapped_column(Id, ForeignKey("users.id"))
    # Items of this run waiting (longer than a moment) for a provider slot or the pace.
    waiting_for_slot: Mapped[int] = mapped_column(Integer, server_default="0")
    waiting_for_pace: Mapped[int] = mapped_column(Integer, server_default="0")
    # How many items a selective regenerate was asked to send (None: the whole job).
    selected: Mapped[int | None] = mapped_column(Integer)
    # The run's own beat: stamped by the process running it (its claim, its heartbeat);
    # older than WORKER_DEAD_SECONDS, the run is dead whatever its process does.
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())


class JobLock(Base):
    """Organization-level leases; the id of a grant is its fencing token."""

    __tablename__ = "job_locks"
    __table_args__ = (
        Index(
            "uq_job_locks_live",
            "organization_id",
            "job_type",
            unique=True,
            postgresql_where=text("released_at IS NULL"),
            sqlite_where=text("released_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    organization_id: Mapped[int] = mapped_column(Id)
    job_type: Mapped[str] = mapped_column(Text)
    holder: Mapped[str] = mapped_column(Text)
    acquired_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class Export(Base):
    """An organization's audio archive being built under the ``audio_export`` lock."""

    __tablename__ = "exports"
    __table_args__ = (Index("ix_exports_organization_id_id", "organization_id", "id"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    organization_id: Mapped[int] = mapped_column(Id, ForeignKey("organizations.id"))
    created_by_id: Mapped[int | None] = mapped_column(Id, ForeignKey("users.id"))
    lock_id: Mapped[int | None] = mapped_column(Id, ForeignKey("job_locks.id"))
    status: Mapped[str] = mapped_column(String(20), default=ExportStatus.RUNNING)
    error_message: Mapped[str | None] = mapped_column(Text)
    file_path: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class Take(Base):
    """One audio an item has had, numbered from 1 per item; the newest few are kept.

    Every DONE move (sent or reused) writes one; a restore makes an older one current
    again. A take's audio is deleted when it falls off and nothing else refers to it.
    """

    __tablename__ = "takes"
    __table_args__ = (
        UniqueConstraint("item_id", "take", name="uq_takes_item_id_take"),
        # Shared audio: whether a kept take still refers to a file is one index probe.
        Index("ix_takes_audio_path", "audio_path"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    item_id: Mapped[int] = mapped_column(Id, ForeignKey("items.id", ondelete="CASCADE"))
    take: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    spoken_text: Mapped[str] = mapped_column(Text)
    voice: Mapped[str] = mapped_column(String(100))
    options: Mapped[str] = mapped_column(Text, server_default="{}")
    audio_path: Mapped[str] = mapped_column(String(500))
    audio_bytes: Mapped[int | None] = mapped_column(Integer)
    audio_sha256: Mapped[str | None] = mapped_column(String(64))
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    duration_seconds: Mapped[float | None] = mapped_column(Float)
    suspect: Mapped[str | None] = mapped_column(String(20))
    reused: Mapped[bool] = mapped_column(Boolean, server_default=false())
    # Where each sentence (and word, where known) is spoken: ``domain.timing``'s JSON.
    # None until measured (a reuse finds it on another take of the same audio).
    timing: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
