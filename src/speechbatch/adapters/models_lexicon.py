"""The schema of the pronunciation lexicon: an organization's rules, its stale pass, and
the dry runs of rules not saved yet."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from speechbatch.adapters.db import Base, Id, UTCDateTime, db_now


class Lexicon(Base):
    """An organization's lexicon: its version and the stale pass that follows a change.

    Every PUT increments ``version``; the stale pass for a version, claimed by
    compare-and-set under a lease (``pass_token`` is the grant, ``pass_expires_at`` on
    the database's clock), ends by setting ``stale_version`` to the version it marked.
    ``stale_version < version`` means a pass is due (or running): a process that dies in
    the middle of one leaves it due, and the next tick of any process does it again.
    """

    __tablename__ = "lexicons"

    organization_id: Mapped[int] = mapped_column(
        Id, ForeignKey("organizations.id"), primary_key=True, autoincrement=False
    )
    version: Mapped[int] = mapped_column(Integer, server_default="0")
    stale_version: Mapped[int] = mapped_column(Integer, server_default="0")
    pass_token: Mapped[int] = mapped_column(Integer, server_default="0")
    pass_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())


class LexiconRule(Base):
    """One rule of an organization's lexicon, at its place in the order."""

    __tablename__ = "lexicon_rules"

    organization_id: Mapped[int] = mapped_column(
        Id, ForeignKey("organizations.id"), primary_key=True, autoincrement=False
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    match: Mapped[str] = mapped_column(String(200))
    say: Mapped[str] = mapped_column(Text)
    regex: Mapped[bool] = mapped_column(Boolean)
    case_sensitive: Mapped[bool] = mapped_column(Boolean)


class LexiconImpact(Base):
    """A dry run of rules nobody saved yet: how many DONE lines (in how many jobs) they
    would make stale, counted in the background (``runner/impact_pass.py``).

    Claimed by compare-and-set under a lease (``lease_token`` is the grant,
    ``lease_expires_at`` on the database's clock), it walks the organization's DONE
    items in (job, position) order a chunk at a time; each chunk writes the counts with
    the cursor (``after_job``, ``after_position``) in one statement, so a request whose
    worker died resumes from where it stopped with exact counts. The items are walked a
    job at a time, so ``counted_job`` (the last job that had a line counted) is enough to
    count distinct jobs. ``rules`` is the canonical JSON of the rules (a save finds the
    check of the same rules by equality)."""

    __tablename__ = "lexicon_impacts"
    __table_args__ = (
        Index("ix_lexicon_impacts_organization_id_id", "organization_id", "id"),
        Index("ix_lexicon_impacts_status", "status"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    organization_id: Mapped[int] = mapped_column(Id, ForeignKey("organizations.id"))
    rules: Mapped[str] = mapped_column(Text)
    # The saved lexicon's version when it was asked (its lines' marks are what it compares).
    lexicon_version: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), server_default="pending")
    lease_token: Mapped[int] = mapped_column(Integer, server_default="0")
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    after_job: Mapped[int] = mapped_column(Id, server_default="0")
    after_position: Mapped[int] = mapped_column(Integer, server_default="-1")
    counted_job: Mapped[int] = mapped_column(Id, server_default="0")
    lines: Mapped[int] = mapped_column(Integer, server_default="0")
    jobs: Mapped[int] = mapped_column(Integer, server_default="0")
    checked: Mapped[int] = mapped_column(Integer, server_default="0")
    total: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
