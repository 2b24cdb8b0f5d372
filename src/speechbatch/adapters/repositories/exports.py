"""Exports: the rows of the ZIP archives being built, fenced by the job lock they hold.

Every compare-and-set returns whether it won, and nothing here commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    case,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import Export, ItemStatus
from speechbatch.adapters.repositories.job_locks import LockRepository, job_locks, live_lock
from speechbatch.adapters.repositories.tables import item_voice, items, jobs
from speechbatch.adapters.repositories.takes import takes
from speechbatch.domain.statuses import ExportStatus

exports = cast(Table, Export.__table__)


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
    key: str | None = None


@dataclass(frozen=True)
class QueuedExport:
    """An export whose lock is held in the name of the worker tier, waiting for a worker."""

    export_id: int
    organization_id: int
    lock_id: int
    holder: str


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
    def queued_exports(self, holder_prefix: str, limit: int) -> list[QueuedExport]: ...
    def recover_dead_exports(
        self,
        organization_id: int,
        message: str,
        *,
        export_id: int | None = None,
        untaken: tuple[str, str] | None = None,
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
        """Every DONE item of the organization that has audio, by job and position, with
        the voice its audio was made with (its current take's; else its speaker's or the
        job's)."""
        take_voice = (
            select(takes.c.voice)
            .where(takes.c.item_id == items.c.id, takes.c.take == items.c.current_take)
            .correlate_except(takes)
            .scalar_subquery()
        )
        rows = self.session.execute(
            select(
                jobs.c.id.label("job_id"),
                jobs.c.title.label("job_title"),
                items.c.id.label("item_id"),
                items.c.position,
                items.c.text,
                func.coalesce(take_voice, item_voice()).label("voice"),
                items.c.audio_path,
                items.c.key,
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

    def queued_exports(self, holder_prefix: str, limit: int) -> list[QueuedExport]:
        """RUNNING exports whose live lock is held under ``holder_prefix`` (read only)."""
        rows = self.session.execute(
            select(exports.c.id, exports.c.organization_id, job_locks.c.id, job_locks.c.holder)
            .join(job_locks, job_locks.c.id == exports.c.lock_id)
            .where(
                exports.c.status == ExportStatus.RUNNING,
                job_locks.c.holder.startswith(holder_prefix, autoescape=True),
                live_lock(exports.c.lock_id),
            )
            .order_by(exports.c.id)
            .limit(limit)
        )
        return [QueuedExport(int(r[0]), int(r[1]), int(r[2]), str(r[3])) for r in rows]

    def any_dead_export(self, organization_id: int, *, export_id: int | None = None) -> bool:
        """Whether a RUNNING export's grant expired or was released (a read: it decides
        whether a read pays for a writing transaction at all)."""
        found = self.session.execute(
            select(exports.c.id).where(_dead_exports(organization_id, export_id)).limit(1)
        ).first()
        return found is not None

    def recover_dead_exports(
        self,
        organization_id: int,
        message: str,
        *,
        export_id: int | None = None,
        untaken: tuple[str, str] | None = None,
    ) -> list[int]:
        """Compare-and-set: fail RUNNING exports whose grant expired or was released.

        One conditional UPDATE; a holder that renewed or completed first keeps its
        export (zero rows). Returns the ids it recovered. ``untaken`` is (holder prefix,
        message): an export whose lock was still held under that prefix (nobody took it
        over) gets that message instead.
        """
        error_message: Any = literal(message)
        if untaken is not None:
            prefix, untaken_message = untaken
            never_taken = (
                exists()
                .where(
                    job_locks.c.id == exports.c.lock_id,
                    job_locks.c.holder.startswith(prefix, autoescape=True),
                )
                .correlate(exports)
            )
            error_message = case((never_taken, literal(untaken_message)), else_=error_message)
        recovered = self.session.execute(
            update(exports)
            .where(_dead_exports(organization_id, export_id))
            .values(status=ExportStatus.FAILED, error_message=error_message, finished_at=db_now())
            .returning(exports.c.id)
        )
        return [int(row.id) for row in recovered]


def _dead_exports(organization_id: int, export_id: int | None) -> ColumnElement[bool]:
    """RUNNING exports of the organization (or that one) whose lock is no longer live."""
    where: list[ColumnElement[bool]] = [
        exports.c.organization_id == organization_id,
        exports.c.status == ExportStatus.RUNNING,
        or_(exports.c.lock_id.is_(None), ~live_lock(exports.c.lock_id)),
    ]
    if export_id is not None:
        where.append(exports.c.id == export_id)
    return and_(*where)
