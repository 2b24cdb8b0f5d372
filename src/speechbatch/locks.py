"""Organization-level job locks and the exports that hold them: the repository side.

A lock is a lease row in ``job_locks``; the partial unique index ``uq_job_locks_live`` on
(organization, job type) WHERE ``released_at IS NULL`` makes two live holders impossible.
Acquisition is one atomic database operation: the ``acquire_job_lock`` function on
PostgreSQL (migration 0002, part of the external contract), and the same UPDATE + INSERT
inside the session's BEGIN IMMEDIATE transaction on SQLite. A grant's id is its fencing
token: every later write of the holder is conditional on that id still being live.

Like ``repository.py``, this is the only place that builds these queries; every
compare-and-set returns whether it won, and nothing here commits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    exists,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from .db import db_now, later
from .domain.statuses import ExportStatus
from .errors import LockHeld, SpeechbatchError
from .models import Export, ItemStatus, JobLock
from .repositories.tables import items, jobs

job_locks = cast(Table, JobLock.__table__)
exports = cast(Table, Export.__table__)

PG_UNIQUE_VIOLATION = "23505"
PG_LOCK_NOT_AVAILABLE = "55P03"
SQLITE_UNIQUE_VIOLATION = "SQLITE_CONSTRAINT_UNIQUE"


def _live(lock_id: int | ColumnElement[Any]) -> ColumnElement[bool]:
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


@dataclass(frozen=True)
class ExportRecord:
    """An export as stored."""

    id: int
    organization_id: int
    lock_id: int | None
    status: str
    error_message: str | None
    file_path: str | None
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class DoneAudio:
    """One DONE item's audio, as an export lists it."""

    job_id: int
    job_title: str
    item_id: int
    position: int
    text: str
    voice: str
    audio_path: str


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


_EXPORT_COLUMNS = [
    exports.c.id,
    exports.c.organization_id,
    exports.c.lock_id,
    exports.c.status,
    exports.c.error_message,
    exports.c.file_path,
    exports.c.created_at,
    exports.c.finished_at,
]


def _export(row: Any) -> ExportRecord:
    return ExportRecord(**row._mapping)


class Locks(Protocol):
    """What the services need of the organization-level locks."""

    def acquire(
        self, organization_id: int, job_type: str, holder: str, ttl_seconds: float
    ) -> JobLockGrant: ...
    def renew(self, lock_id: int, holder: str, ttl_seconds: float) -> bool: ...
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


class Exports(Protocol):
    """What the services need of exports."""

    def create_export(self, organization_id: int, user_id: int | None, lock_id: int) -> int: ...
    def get_export(self, export_id: int, organization_id: int) -> ExportRecord | None: ...
    def list_exports(self, organization_id: int, *, limit: int = 50) -> list[ExportRecord]: ...
    def is_running(self, export_id: int, lock_id: int) -> bool: ...
    def done_audio(self, organization_id: int) -> list[DoneAudio]: ...
    def complete_export(
        self, export_id: int, lock_id: int, holder: str, file_path: str
    ) -> bool: ...
    def fail_export(self, export_id: int, lock_id: int, message: str) -> bool: ...
    def any_dead_export(self, organization_id: int, *, export_id: int | None = None) -> bool: ...
    def recover_dead_exports(
        self, organization_id: int, message: str, *, export_id: int | None = None
    ) -> list[int]: ...


class ExportRepository:
    """Exports: their rows, the audio they pack, and their lock-fenced transitions."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def create_export(self, organization_id: int, user_id: int | None, lock_id: int) -> int:
        """Insert a RUNNING export held by ``lock_id``; return its id."""
        return int(
            self.session.execute(
                insert(exports)
                .values(
                    organization_id=organization_id,
                    created_by_id=user_id,
                    lock_id=lock_id,
                    status=ExportStatus.RUNNING,
                    created_at=db_now(),
                )
                .returning(exports.c.id)
            ).scalar_one()
        )

    def get_export(self, export_id: int, organization_id: int) -> ExportRecord | None:
        """An export of that organization, or None."""
        row = self.session.execute(
            select(*_EXPORT_COLUMNS).where(
                exports.c.id == export_id, exports.c.organization_id == organization_id
            )
        ).first()
        return _export(row) if row is not None else None

    def list_exports(self, organization_id: int, *, limit: int = 50) -> list[ExportRecord]:
        """An organization's exports, newest first."""
        return [
            _export(r)
            for r in self.session.execute(
                select(*_EXPORT_COLUMNS)
                .where(exports.c.organization_id == organization_id)
                .order_by(exports.c.id.desc())
                .limit(limit)
            )
        ]

    def is_running(self, export_id: int, lock_id: int) -> bool:
        """Whether the export is still RUNNING under this grant (read only)."""
        return (
            self.session.execute(
                select(exports.c.id).where(
                    exports.c.id == export_id,
                    exports.c.lock_id == lock_id,
                    exports.c.status == ExportStatus.RUNNING,
                )
            ).first()
            is not None
        )

    def done_audio(self, organization_id: int) -> list[DoneAudio]:
        """Every DONE item of the organization that has audio, by job and position."""
        rows = self.session.execute(
            select(
                jobs.c.id.label("job_id"),
                jobs.c.title.label("job_title"),
                items.c.id.label("item_id"),
                items.c.position,
                items.c.text,
                jobs.c.voice,
                items.c.audio_path,
            )
            .join(jobs, jobs.c.id == items.c.job_id)
            .where(
                jobs.c.organization_id == organization_id,
                items.c.status == ItemStatus.DONE,
                items.c.audio_path.is_not(None),
            )
            .order_by(jobs.c.id, items.c.position)
        )
        return [DoneAudio(**r._mapping) for r in rows]

    def complete_export(self, export_id: int, lock_id: int, holder: str, file_path: str) -> bool:
        """Fenced: release our live grant and mark the export COMPLETED; whether both won.

        The grant's row is taken first (the guard is on the row being updated), so a
        concurrent reclaim or recovery is serialized with this. False means the export
        was declared dead or its lock passed on: the caller must roll back.
        """
        lock = LockRepository(self.session)
        if not lock.release_live(lock_id, holder):
            return False
        return self._end_export(
            export_id,
            lock_id,
            status=ExportStatus.COMPLETED,
            file_path=file_path,
            error_message=None,
        )

    def fail_export(self, export_id: int, lock_id: int, message: str) -> bool:
        """Mark a RUNNING export of this grant FAILED; False when it has ended already."""
        return self._end_export(
            export_id, lock_id, status=ExportStatus.FAILED, error_message=message
        )

    def _end_export(self, export_id: int, lock_id: int, **values: Any) -> bool:
        """End a RUNNING export of this grant with ``values``; whether it won."""
        return (
            self.session.execute(
                update(exports)
                .where(
                    exports.c.id == export_id,
                    exports.c.lock_id == lock_id,
                    exports.c.status == ExportStatus.RUNNING,
                )
                .values(finished_at=db_now(), **values)
                .returning(exports.c.id)
            ).first()
            is not None
        )

    def any_dead_export(self, organization_id: int, *, export_id: int | None = None) -> bool:
        """Whether a RUNNING export's grant expired or was released (a read: it decides
        whether a read pays for a writing transaction at all)."""
        found = self.session.execute(
            select(exports.c.id).where(_dead_exports(organization_id, export_id)).limit(1)
        ).first()
        return found is not None

    def recover_dead_exports(
        self, organization_id: int, message: str, *, export_id: int | None = None
    ) -> list[int]:
        """Compare-and-set: fail RUNNING exports whose grant expired or was released.

        One conditional UPDATE; a holder that renewed or completed first keeps its
        export (zero rows). Returns the ids it recovered.
        """
        recovered = self.session.execute(
            update(exports)
            .where(_dead_exports(organization_id, export_id))
            .values(status=ExportStatus.FAILED, error_message=message, finished_at=db_now())
            .returning(exports.c.id)
        )
        return [int(row.id) for row in recovered]


def _dead_exports(organization_id: int, export_id: int | None) -> ColumnElement[bool]:
    """RUNNING exports of the organization (or that one) whose lock is no longer live."""
    where: list[ColumnElement[bool]] = [
        exports.c.organization_id == organization_id,
        exports.c.status == ExportStatus.RUNNING,
        or_(exports.c.lock_id.is_(None), ~_live(exports.c.lock_id)),
    ]
    if export_id is not None:
        where.append(exports.c.id == export_id)
    return and_(*where)
