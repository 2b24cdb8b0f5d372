"""The schema of ``Idempotency-Key``: each key an organization sent with a creating call,
for 24 hours, with what the first request created and what it answered."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from speechbatch.adapters.db import Base, Id, UTCDateTime, db_now


class IdempotencyKey(Base):
    """One key of one organization. ``claim`` counts the requests that held it (a
    request whose process died before it created anything is taken over by a repeat once
    ``locked_until`` has passed); ``resource`` is written in the transaction that creates
    (``job:ID``, ``render:JOB:ID``, ``export:ID``), so a key never creates twice; the
    answer (``status_code``, ``body``) is what every repeat gets."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (
        UniqueConstraint("organization_id", "key", name="uq_idempotency_keys_organization_id"),
        # The sweep of expired keys (on every claim of a key) reads them in this order.
        Index("ix_idempotency_keys_expires_at", "expires_at"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    organization_id: Mapped[int] = mapped_column(
        Id, ForeignKey("organizations.id", ondelete="CASCADE")
    )
    key: Mapped[str] = mapped_column(String(255))
    # SHA-256 of the method, the path and the request's content.
    fingerprint: Mapped[str] = mapped_column(String(64))
    claim: Mapped[int] = mapped_column(Integer, default=1)
    locked_until: Mapped[datetime] = mapped_column(UTCDateTime())
    resource: Mapped[str | None] = mapped_column(String(100))
    status_code: Mapped[int | None] = mapped_column(Integer)
    body: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
