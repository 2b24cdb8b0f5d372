"""Organization-level job locks: the repository side.

A lock is a lease row in ``job_locks``; the partial unique index ``uq_job_locks_live`` on
(organization, job type) WHERE ``released_at IS NULL`` makes two live holders impossible.
Acquisition is one atomic database operation: the ``acquire_job_lock`` function on
PostgreSQL (migration 0002, part of the external contract), and the same UPDATE + INSERT
inside the session's BEGIN IMMEDIATE transaction on SQLite. A grant's id is its fencing
token: every later write of the holder is conditional on that id still being live.
Every compare-and-set returns whether it won, and nothing here commits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

from sqlalchemy import (
    ColumnElement,
    Table,
    exists,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now, later
from speechbatch.adapters.models import JobLock
from speechbatch.errors import LockHeld, SpeechbatchError

job_locks = cast(Table, JobLock.__table__)


PG_UNIQUE_VIOLATION = "23505"


PG_LOCK_NOT_AVAILABLE = "55P03"


SQLITE_UNIQUE_VIOLATION = "SQLITE_CONSTRAINT_UNIQUE"


def live_lock(lock_id: int | ColumnElement[Any]) -> ColumnElement[bool]:
    """The grant ``lock_id`` is neither released nor expired (by the database's clock)."""
    return (
        exists()
        .where(
            job_locks.c.id == lock_id,
            job_locks.c.released_at.is_(None),
            job_locks.c.expires_at > db_now(),
        )
        .correlate_except(job_locks)
    )


def _ours_and_live(lock_id: int, holder: str) -> tuple[ColumnElement[bool], ...]:
    """The grant is this holder's and neither released nor expired (database clock)."""
    return (
        job_locks.c.id == lock_id,
        job_locks.c.holder == holder,
        job_locks.c.released_at.is_(None),
        job_locks.c.expires_at > db_now(),
    )


def is_unique_violation(exc: IntegrityError) -> bool:
    """Whether a driver error is a unique violation (PostgreSQL or SQLite)."""
    orig = exc.orig
    return (
        getattr(orig, "sqlstate", None) == PG_UNIQUE_VIOLATION
        or getattr(orig, "sqlite_errorname", None) == SQLITE_UNIQUE_VIOLATION
    )


@dataclass(frozen=True)
class JobLockGrant:
    """A granted lock; ``id`` is the fencing token of everything its holder writes."""

    id: int
    organization_id: int
    job_type: str
    holder: str
    acquired_at: datetime
    expires_at: datetime
    released_at: datetime | None = None


def _grant(row: Any) -> JobLockGrant:
    m = row._mapping
    return JobLockGrant(
        id=int(m["id"]),
        organization_id=int(m["organization_id"]),
        job_type=m["job_type"],
        holder=m["holder"],
        acquired_at=m["acquired_at"],
        expires_at=m["expires_at"],
        released_at=m["released_at"],
    )


class Locks(Protocol):
    """What the services need of the organization-level locks."""

    def acquire(
        self, organization_id: int, job_type: str, holder: str, ttl_seconds: float
    ) -> JobLockGrant: ...
    def renew(self, lock_id: int, holder: str, ttl_seconds: float) -> bool: ...
    def hand_over(self, lock_id: int, holder: str, new_holder: str, ttl_seconds: float) -> bool: ...
    def release(self, lock_id: int) -> bool: ...


class LockRepository:
    """Acquire, renew and release organization-level job locks over one session."""

    # Typed like the table, so that timestamps come back as aware UTC datetimes.
    _ACQUIRE_SQL = text(
        "SELECT * FROM acquire_job_lock(:organization_id, :job_type, :holder, :ttl_seconds)"
    ).columns(**{c.name: c.type for c in job_locks.c})

    def __init__(self, session: Session) -> None:
        self.session = session

    def acquire(
        self, organization_id: int, job_type: str, holder: str, ttl_seconds: float
    ) -> JobLockGrant:
        """Take the (organization, job type) lock for ``ttl_seconds``; raise LockHeld.

        A live lock whose lease has run out is released and the new one granted in the
        same atomic step. The attempt runs in a savepoint, so a refusal leaves the
        caller's transaction usable.
        """
        if ttl_seconds <= 0:
            raise ValueError("a lock's ttl must be positive")
        dialect = self.session.get_bind().dialect.name
        try:
            with self.session.begin_nested():
                if dialect == "postgresql":
                    row = self.session.execute(
                        self._ACQUIRE_SQL,
                        {
                            "organization_id": organization_id,
                            "job_type": job_type,
                            "holder": holder,
                            # The contract's function takes whole seconds: never shorten.
                            "ttl_seconds": max(1, math.ceil(ttl_seconds)),
                        },
                    ).first()
                else:
                    row = self._acquire_in_transaction(
                        organization_id, job_type, holder, ttl_seconds
                    )
        except IntegrityError as exc:
            if is_unique_violation(exc):
                raise LockHeld(
                    f"the {job_type} lock of organization {organization_id} is held"
                ) from exc
            raise
        except OperationalError as exc:
            # lock_timeout while waiting on a concurrent acquirer's uncommitted grant.
            if getattr(exc.orig, "sqlstate", None) == PG_LOCK_NOT_AVAILABLE:
                raise LockHeld(
                    f"the {job_type} lock of organization {organization_id} is being taken"
                ) from exc
            raise
        if row is None:
            raise SpeechbatchError("acquire_job_lock granted nothing and raised nothing")
        return _grant(row)

    def _acquire_in_transaction(
        self, organization_id: int, job_type: str, holder: str, ttl_seconds: float
    ) -> Any:
        """SQLite: the function's two statements; BEGIN IMMEDIATE makes them atomic."""
        self.session.execute(
            update(job_locks)
            .where(
                job_locks.c.organization_id == organization_id,
                job_locks.c.job_type == job_type,
                job_locks.c.released_at.is_(None),
                job_locks.c.expires_at <= db_now(),
            )
            .values(released_at=db_now())
        )
        return self.session.execute(
            insert(job_locks)
            .values(
                organization_id=organization_id,
                job_type=job_type,
                holder=holder,
                acquired_at=db_now(),
                expires_at=later(ttl_seconds),
            )
            .returning(*job_locks.c)
        ).first()

    def renew(self, lock_id: int, holder: str, ttl_seconds: float) -> bool:
        """Extend a live grant to ``ttl_seconds`` from now; False when it is no longer ours.

        Only the grant's own row is guarded (id, holder, not released, not expired), so a
        grant that expired is never revived, even if nobody has reclaimed it yet.
        """
        return (
            self.session.execute(
                update(job_locks)
                .where(*_ours_and_live(lock_id, holder))
                .values(expires_at=later(ttl_seconds))
                .returning(job_locks.c.id)
            ).first()
            is not None
        )

    def hand_over(self, lock_id: int, holder: str, new_holder: str, ttl_seconds: float) -> bool:
        """Compare-and-set: pass a live grant from ``holder`` to ``new_holder`` for
        ``ttl_seconds`` from now; whether it won (of two takers exactly one does)."""
        return (
            self.session.execute(
                update(job_locks)
                .where(*_ours_and_live(lock_id, holder))
                .values(holder=new_holder, expires_at=later(ttl_seconds))
                .returning(job_locks.c.id)
            ).first()
            is not None
        )

    def release(self, lock_id: int) -> bool:
        """Release a grant by its id; False when it was released already (by anyone)."""
        return (
            self.session.execute(
                update(job_locks)
                .where(job_locks.c.id == lock_id, job_locks.c.released_at.is_(None))
                .values(released_at=db_now())
                .returning(job_locks.c.id)
            ).first()
            is not None
        )

    def release_live(self, lock_id: int, holder: str) -> bool:
        """Release a grant that is still live and ours; False when it is not (fenced).

        The UPDATE holds the lock row until commit, so everything the holder writes in
        the same transaction is serialized with a reclaim of that lock.
        """
        return (
            self.session.execute(
                update(job_locks)
                .where(*_ours_and_live(lock_id, holder))
                .values(released_at=db_now())
                .returning(job_locks.c.id)
            ).first()
            is not None
        )

    def get(self, lock_id: int) -> JobLockGrant | None:
        """A grant by id, released or not."""
        row = self.session.execute(select(*job_locks.c).where(job_locks.c.id == lock_id)).first()
        return _grant(row) if row is not None else None

    def live(self, organization_id: int, job_type: str) -> JobLockGrant | None:
        """The unreleased grant of a pair, expired or not."""
        row = self.session.execute(
            select(*job_locks.c).where(
                job_locks.c.organization_id == organization_id,
                job_locks.c.job_type == job_type,
                job_locks.c.released_at.is_(None),
            )
        ).first()
        return _grant(row) if row is not None else None
