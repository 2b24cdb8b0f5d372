"""Renders: the rows of a job's audio files being built, fenced by the job lock they hold.

Every compare-and-set returns whether it won, and nothing here commits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

from sqlalchemy import ColumnElement, Table, and_, func, insert, or_, select, update
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import Chapter, ItemStatus, Render
from speechbatch.adapters.repositories.job_locks import LockRepository, job_locks, live_lock
from speechbatch.adapters.repositories.tables import items, jobs
from speechbatch.adapters.repositories.takes import takes
from speechbatch.domain.renders import AUDIO_FORMATS, RenderOptions
from speechbatch.domain.statuses import RenderStatus

renders = cast(Table, Render.__table__)
chapters = cast(Table, Chapter.__table__)


@dataclass(frozen=True)
class RenderRecord:
    """A render as stored (``chapters`` decoded from its JSON)."""

    id: int
    organization_id: int
    job_id: int
    lock_id: int | None
    status: str
    format: str
    gap_ms: int
    chapter_gap_ms: int
    loudness_lufs: float | None
    error_message: str | None
    file_path: str | None
    vtt_path: str | None
    srt_path: str | None
    duration_seconds: float | None
    chapters: list[dict[str, Any]]
    created_at: datetime
    finished_at: datetime | None
    preset: str | None
    check_report: dict[str, Any] | None
    zip_path: str | None
    paragraph_gap_ms: int

    @property
    def options(self) -> RenderOptions:
        """What the render was asked for."""
        return RenderOptions(
            self.format, self.gap_ms, self.chapter_gap_ms, self.loudness_lufs, self.preset,
            self.paragraph_gap_ms,
        )  # fmt: skip


@dataclass(frozen=True)
class RenderableJob:
    """What starting a render needs to know of its job."""

    id: int
    title: str
    status: str
    items: int
    items_ready: int


@dataclass(frozen=True)
class RenderItem:
    """One item as a render reads it: where it goes, what it says, its current audio."""

    position: int
    text: str
    audio_path: str
    timing: str | None = None  # its take's timing (JSON), when measured


@dataclass(frozen=True)
class RenderFiles:
    """What a finished render wrote: its keys, its length and its chapter markers."""

    file_path: str
    vtt_path: str
    srt_path: str
    duration_seconds: float
    chapters: list[dict[str, Any]]
    check_report: dict[str, Any]
    zip_path: str | None = None


@dataclass(frozen=True)
class QueuedRender:
    """A render waiting for a worker: its row, its lock's holder, and its job."""

    render: RenderRecord
    holder: str
    job_title: str
    items: int


def _render(row: Any) -> RenderRecord:
    values = {c.name: row._mapping[c.name] for c in _COLUMNS}
    values["chapters"] = json.loads(values["chapters"]) if values["chapters"] else []
    report = values["check_report"]
    values["check_report"] = json.loads(report) if report else None
    return RenderRecord(**values)


class Renders(Protocol):
    """What the services need of renders."""

    def renderable_job(self, job_id: int, organization_id: int) -> RenderableJob | None: ...
    def create_render(
        self, organization_id: int, job_id: int, user_id: int | None, lock_id: int,
        options: RenderOptions,
    ) -> int: ...  # fmt: skip
    def get_render(
        self, render_id: int, job_id: int, organization_id: int
    ) -> RenderRecord | None: ...
    def list_renders(self, job_id: int, organization_id: int) -> list[RenderRecord]: ...
    def newest_completed(self, job_id: int) -> RenderRecord | None: ...
    def is_running(self, render_id: int, lock_id: int) -> bool: ...
    def chapter_titles(self, job_id: int) -> dict[int, str]: ...
    def render_items(self, job_id: int, after_position: int, limit: int) -> list[RenderItem]: ...
    def complete_render(
        self, render_id: int, lock_id: int, holder: str, files: RenderFiles
    ) -> bool: ...
    def fail_render(self, render_id: int, lock_id: int, message: str) -> bool: ...
    def any_dead_render(self, job_id: int, *, render_id: int | None = None) -> bool: ...
    def queued_renders(self, holder_prefix: str, limit: int) -> list[QueuedRender]: ...
    def recover_dead_renders(
        self, job_id: int, message: str, *, render_id: int | None = None
    ) -> list[RenderRecord]: ...


class RenderRepository:
    """Renders: their rows, the items they read, and their lock-fenced transitions."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def renderable_job(self, job_id: int, organization_id: int) -> RenderableJob | None:
        """The job of that organization with its item count and how many are DONE with
        audio (a render needs them all), or None."""
        ready = (
            select(func.count())
            .where(
                items.c.job_id == jobs.c.id,
                items.c.status == ItemStatus.DONE,
                items.c.audio_path.is_not(None),
            )
            .scalar_subquery()
        )
        total = jobs.c.items_pending + jobs.c.items_generating
        total = total + jobs.c.items_done + jobs.c.items_error
        row = self.session.execute(
            select(
                jobs.c.id,
                jobs.c.title,
                jobs.c.status,
                total.label("items"),
                ready.label("items_ready"),
            ).where(jobs.c.id == job_id, jobs.c.organization_id == organization_id)
        ).first()
        return RenderableJob(**row._mapping) if row is not None else None

    def create_render(
        self, organization_id: int, job_id: int, user_id: int | None, lock_id: int,
        options: RenderOptions,
    ) -> int:  # fmt: skip
        """Insert a RUNNING render held by ``lock_id``; return its id."""
        return int(
            self.session.execute(
                insert(renders)
                .values(
                    organization_id=organization_id,
                    job_id=job_id,
                    created_by_id=user_id,
                    lock_id=lock_id,
                    status=RenderStatus.RUNNING,
                    format=options.format,
                    gap_ms=options.gap_ms,
                    chapter_gap_ms=options.chapter_gap_ms,
                    paragraph_gap_ms=options.paragraph_gap_ms,
                    loudness_lufs=options.loudness_lufs,
                    preset=options.preset,
                    created_at=db_now(),
                )
                .returning(renders.c.id)
            ).scalar_one()
        )

    def get_render(self, render_id: int, job_id: int, organization_id: int) -> RenderRecord | None:
        """A render of that job of that organization, or None."""
        row = self.session.execute(
            select(*_COLUMNS).where(
                renders.c.id == render_id,
                renders.c.job_id == job_id,
                renders.c.organization_id == organization_id,
            )
        ).first()
        return _render(row) if row is not None else None

    def list_renders(self, job_id: int, organization_id: int) -> list[RenderRecord]:
        """A job's renders, newest first (at most 50)."""
        return [
            _render(r)
            for r in self.session.execute(
                select(*_COLUMNS)
                .where(renders.c.job_id == job_id, renders.c.organization_id == organization_id)
                .order_by(renders.c.id.desc())
                .limit(50)
            )
        ]

    def newest_completed(self, job_id: int) -> RenderRecord | None:
        """The job's newest COMPLETED audio render (what its feed publishes: not a
        read-along book), or None."""
        row = self.session.execute(
            select(*_COLUMNS)
            .where(
                renders.c.job_id == job_id,
                renders.c.status == RenderStatus.COMPLETED,
                renders.c.format.in_(AUDIO_FORMATS),
            )
            .order_by(renders.c.id.desc())
            .limit(1)
        ).first()
        return _render(row) if row is not None else None

    def is_running(self, render_id: int, lock_id: int) -> bool:
        """Whether the render is still RUNNING under this grant (read only)."""
        found = self.session.execute(
            select(renders.c.id).where(
                renders.c.id == render_id,
                renders.c.lock_id == lock_id,
                renders.c.status == RenderStatus.RUNNING,
            )
        ).first()
        return found is not None

    def chapter_titles(self, job_id: int) -> dict[int, str]:
        """Each chapter's first item position and its title (empty for jobs from lines)."""
        rows = self.session.execute(
            select(chapters.c.first_position, chapters.c.title)
            .where(chapters.c.job_id == job_id)
            .order_by(chapters.c.index)
        )
        return {int(r.first_position): str(r.title) for r in rows}

    def render_items(self, job_id: int, after_position: int, limit: int) -> list[RenderItem]:
        """The next ``limit`` DONE items with audio after ``after_position``, in order
        (a page: a render never holds every item's text at once)."""
        # Every take of one audio has the same timing: one probe of the audio's index.
        timing = (
            select(takes.c.timing)
            .where(takes.c.audio_path == items.c.audio_path, takes.c.timing.is_not(None))
            .limit(1)
            .scalar_subquery()
        )
        rows = self.session.execute(
            select(items.c.position, items.c.text, items.c.audio_path, timing.label("timing"))
            .where(
                items.c.job_id == job_id,
                items.c.position > after_position,
                items.c.status == ItemStatus.DONE,
                items.c.audio_path.is_not(None),
            )
            .order_by(items.c.position)
            .limit(limit)
        )
        return [RenderItem(**r._mapping) for r in rows]

    def complete_render(
        self, render_id: int, lock_id: int, holder: str, files: RenderFiles
    ) -> bool:
        """Fenced: release our live grant and mark the render COMPLETED; whether both won.

        The grant's row is taken first, so a concurrent reclaim or recovery is serialized
        with this. False means the render was declared dead or its lock passed on: the
        caller must roll back.
        """
        if not LockRepository(self.session).release_live(lock_id, holder):
            return False
        return self._end(
            render_id,
            lock_id,
            status=RenderStatus.COMPLETED,
            file_path=files.file_path,
            vtt_path=files.vtt_path,
            srt_path=files.srt_path,
            duration_seconds=files.duration_seconds,
            chapters=json.dumps(files.chapters),
            check_report=json.dumps(files.check_report),
            zip_path=files.zip_path,
        )

    def fail_render(self, render_id: int, lock_id: int, message: str) -> bool:
        """Mark a RUNNING render of this grant FAILED; False when it has ended already."""
        return self._end(render_id, lock_id, status=RenderStatus.FAILED, error_message=message)

    def _end(self, render_id: int, lock_id: int, **values: Any) -> bool:
        """End a RUNNING render of this grant with ``values``; whether it won."""
        ended = self.session.execute(
            update(renders)
            .where(
                renders.c.id == render_id,
                renders.c.lock_id == lock_id,
                renders.c.status == RenderStatus.RUNNING,
            )
            .values(finished_at=db_now(), **values)
            .returning(renders.c.id)
        ).first()
        return ended is not None

    def queued_renders(self, holder_prefix: str, limit: int) -> list[QueuedRender]:
        """RUNNING renders whose live lock is held under ``holder_prefix`` (the worker
        tier's name: nobody builds them yet), oldest first, with their job (read only)."""
        rows = self.session.execute(
            select(
                *_COLUMNS,
                job_locks.c.holder.label("lock_holder"),
                jobs.c.title.label("job_title"),
                jobs.c.items_done,
            )
            .join(job_locks, job_locks.c.id == renders.c.lock_id)
            .join(jobs, jobs.c.id == renders.c.job_id)
            .where(
                renders.c.status == RenderStatus.RUNNING,
                job_locks.c.holder.startswith(holder_prefix, autoescape=True),
                live_lock(renders.c.lock_id),
            )
            .order_by(renders.c.id)
            .limit(limit)
        )
        return [
            QueuedRender(_render(row), str(row.lock_holder), str(row.job_title), row.items_done)
            for row in rows
        ]

    def any_dead_render(self, job_id: int, *, render_id: int | None = None) -> bool:
        """Whether a RUNNING render of the job lost its grant (expired or released): a read
        that decides whether a read pays for a writing transaction at all."""
        found = self.session.execute(
            select(renders.c.id).where(_dead_renders(job_id, render_id)).limit(1)
        ).first()
        return found is not None

    def recover_dead_renders(
        self, job_id: int, message: str, *, render_id: int | None = None
    ) -> list[RenderRecord]:
        """Compare-and-set: fail the job's RUNNING renders whose grant expired or was
        released. A holder that renewed or completed first keeps its render (zero rows).
        Returns the renders it recovered, as they are now."""
        recovered = self.session.execute(
            update(renders)
            .where(_dead_renders(job_id, render_id))
            .values(status=RenderStatus.FAILED, error_message=message, finished_at=db_now())
            .returning(*_COLUMNS)
        )
        return [_render(row) for row in recovered]


_COLUMNS = [c for c in renders.c if c.name not in ("created_by_id",)]


def _dead_renders(job_id: int, render_id: int | None) -> ColumnElement[bool]:
    """RUNNING renders of the job (or that one) whose lock is no longer live."""
    where: list[ColumnElement[bool]] = [
        renders.c.job_id == job_id,
        renders.c.status == RenderStatus.RUNNING,
        or_(renders.c.lock_id.is_(None), ~live_lock(renders.c.lock_id)),
    ]
    if render_id is not None:
        where.append(renders.c.id == render_id)
    return and_(*where)
