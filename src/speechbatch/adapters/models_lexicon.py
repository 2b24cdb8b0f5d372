"""The schema of the pronunciation lexicon: an organization's rules and its stale pass."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Integer, String, Text
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
