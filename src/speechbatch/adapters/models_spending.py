"""The schema of what paying the provider needs: the monthly ledger and each attempt's
reservation, and the deployment's provider slots and pace."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from speechbatch.adapters.db import Base, Id, UTCDateTime, db_now


class UsageMonth(Base):
    """The ledger: characters billed and provider calls per organization and UTC month."""

    __tablename__ = "usage_months"
    __table_args__ = (
        UniqueConstraint("organization_id", "month", name="uq_usage_months_organization_id"),
        # A refund gives back only what a reservation of that month took.
        CheckConstraint("billed_characters >= 0", name="billed_characters_not_negative"),
        CheckConstraint("provider_calls >= 0", name="provider_calls_not_negative"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    organization_id: Mapped[int] = mapped_column(Id, ForeignKey("organizations.id"))
    month: Mapped[str] = mapped_column(String(7))  # "YYYY-MM", UTC
    billed_characters: Mapped[int] = mapped_column(BigInteger, server_default="0")
    provider_calls: Mapped[int] = mapped_column(BigInteger, server_default="0")
    # Of those, calls whose request was written but whose answer was lost (billed).
    in_doubt_calls: Mapped[int] = mapped_column(BigInteger, server_default="0")
    in_doubt_characters: Mapped[int] = mapped_column(BigInteger, server_default="0")


class Reservation(Base):
    """One provider attempt's characters, billed to a month before it is sent.

    A refund (the attempt was not sent after all) flips ``refunded_at`` by
    compare-and-set and gives the characters back to the month that paid, so a
    retried refund gives back nothing more.
    """

    __tablename__ = "reservations"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    organization_id: Mapped[int] = mapped_column(Id, ForeignKey("organizations.id"))
    job_id: Mapped[int] = mapped_column(Id, ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    month: Mapped[str] = mapped_column(String(7))  # "YYYY-MM", UTC: the month that paid
    characters: Mapped[int] = mapped_column(Integer)
    # The provider the attempt went to (NULL: a row from before several providers).
    provider: Mapped[str | None] = mapped_column(String(20))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    refunded_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Its request was written and its answer lost: billed, and counted as in doubt.
    in_doubt_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class ProviderSlot(Base):
    """One of PROVIDER_CONCURRENCY deployment-wide provider slots, leased per call.

    Slot numbers run from 0 to PROVIDER_CONCURRENCY - 1, so the primary key caps the
    calls in flight. A row is held while ``released_at`` is NULL and its worker
    heartbeats; ``token`` grows with every grant and fences the release.
    """

    __tablename__ = "provider_slots"

    slot: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    token: Mapped[int] = mapped_column(BigInteger, default=1, server_default="1")
    worker_id: Mapped[int] = mapped_column(Id, ForeignKey("workers.id"))
    job_id: Mapped[int] = mapped_column(Id, index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    acquired_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class ProviderPace(Base):
    """The deployment's one pace row: no provider call starts before ``next_start_at``."""

    __tablename__ = "provider_pace"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    next_start_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
