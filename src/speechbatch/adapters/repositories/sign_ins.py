"""Sign-in throttling kept in the database, so that it holds across processes and machines."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import case, delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from speechbatch.adapters.db import ago, db_now
from speechbatch.adapters.repositories.tables import sign_in_throttles as throttles


@dataclass(frozen=True)
class AttemptCount:
    """Where one email from one address stands in its window, this attempt included."""

    attempts: int
    window_started_at: datetime
    now: datetime


class SignIns(Protocol):
    """What the services need of the sign-in throttle's tallies."""

    def count_attempt(
        self, email: str, client_address: str, window_seconds: float
    ) -> AttemptCount: ...
    def forget(self, email: str, client_address: str) -> None: ...
    def purge_expired(self, window_seconds: float) -> None: ...


class SignInRepository:
    """SQL about ``sign_in_throttles``; runs inside the caller's unit of work, never commits."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def count_attempt(self, email: str, client_address: str, window_seconds: float) -> AttemptCount:
        """Count one sign-in attempt of ``email`` from ``client_address`` and return the tally.

        One upsert: a window older than ``window_seconds`` starts again at this attempt.
        Attempts racing on several processes each get their own number, so no burst of
        guesses slips under the limit.
        """
        dialect = postgresql if self.session.get_bind().dialect.name == "postgresql" else sqlite
        expired = throttles.c.window_started_at <= ago(window_seconds)
        statement = (
            dialect.insert(throttles)
            .values(
                email=email, client_address=client_address, window_started_at=db_now(), attempts=1
            )
            .on_conflict_do_update(
                index_elements=[throttles.c.email, throttles.c.client_address],
                set_={
                    "attempts": case((expired, 1), else_=throttles.c.attempts + 1),
                    "window_started_at": case(
                        (expired, db_now()), else_=throttles.c.window_started_at
                    ),
                },
            )
            .returning(throttles.c.attempts, throttles.c.window_started_at, db_now())
        )
        row = self.session.execute(statement).one()
        return AttemptCount(int(row[0]), row[1], row[2])

    def forget(self, email: str, client_address: str) -> None:
        """Drop the tally of ``email`` from ``client_address`` (after a successful sign-in)."""
        self.session.execute(
            delete(throttles).where(
                throttles.c.email == email, throttles.c.client_address == client_address
            )
        )

    def purge_expired(self, window_seconds: float) -> None:
        """Drop every tally whose window ended ``window_seconds`` or more ago (no longer counts)."""
        self.session.execute(
            delete(throttles).where(throttles.c.window_started_at <= ago(window_seconds))
        )
