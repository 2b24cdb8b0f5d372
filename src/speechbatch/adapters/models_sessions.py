"""The schema of browser sessions: one row per signed-in browser, ended on the server."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from speechbatch.adapters.db import Base, Id, UTCDateTime, db_now


class BrowserSession(Base):
    """A signed-in browser. Its cookie carries a random secret and this row only the
    secret's SHA-256; signing out deletes the row, so no copy of the cookie signs in."""

    __tablename__ = "browser_sessions"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    user_id: Mapped[int] = mapped_column(Id, ForeignKey("users.id"), index=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), server_default=db_now())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
