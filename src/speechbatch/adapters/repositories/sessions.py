"""Browser sessions on the server: open one at sign-in, find its user on each request,
end one (sign-out) or all of a user's (sign out everywhere)."""

from __future__ import annotations

from typing import Protocol, cast

from sqlalchemy import Table, delete, insert, select
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now, later
from speechbatch.adapters.models_sessions import BrowserSession
from speechbatch.adapters.repositories.tables import users
from speechbatch.adapters.repositories.users import UserRecord

browser_sessions = cast(Table, BrowserSession.__table__)


class Sessions(Protocol):
    """What the account services need of browser sessions."""

    def open_session(self, user_id: int, secret_hash: str, lifetime_seconds: float) -> None: ...
    def user_of_session(self, secret_hash: str) -> UserRecord | None: ...
    def end_session(self, secret_hash: str) -> bool: ...
    def end_sessions_of(self, user_id: int) -> int: ...
    def purge_expired_sessions(self) -> int: ...


class SessionsRepository:
    """Browser sessions, over one session of the database."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def open_session(self, user_id: int, secret_hash: str, lifetime_seconds: float) -> None:
        """Record a signed-in browser until ``lifetime_seconds`` from now (database clock)."""
        self.session.execute(
            insert(browser_sessions).values(
                user_id=user_id, secret_hash=secret_hash, expires_at=later(lifetime_seconds)
            )
        )

    def user_of_session(self, secret_hash: str) -> UserRecord | None:
        """The user of a live (not ended, not expired) session, or None."""
        row = self.session.execute(
            select(users.c.id, users.c.organization_id, users.c.email)
            .join(browser_sessions, browser_sessions.c.user_id == users.c.id)
            .where(
                browser_sessions.c.secret_hash == secret_hash,
                browser_sessions.c.expires_at > db_now(),
            )
        ).first()
        return UserRecord(row.id, row.organization_id, row.email) if row else None

    def end_session(self, secret_hash: str) -> bool:
        """Delete one session; whether it was live."""
        row = self.session.execute(
            delete(browser_sessions)
            .where(browser_sessions.c.secret_hash == secret_hash)
            .returning(browser_sessions.c.id)
        ).first()
        return row is not None

    def end_sessions_of(self, user_id: int) -> int:
        """Delete every session of a user; how many there were."""
        rows = self.session.execute(
            delete(browser_sessions)
            .where(browser_sessions.c.user_id == user_id)
            .returning(browser_sessions.c.id)
        ).all()
        return len(rows)

    def purge_expired_sessions(self) -> int:
        """Delete the sessions whose time ran out; how many."""
        rows = self.session.execute(
            delete(browser_sessions)
            .where(browser_sessions.c.expires_at <= db_now())
            .returning(browser_sessions.c.id)
        ).all()
        return len(rows)
