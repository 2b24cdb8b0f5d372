"""Edits of a job that is not running: an item's text, a take restored, the job's voice,
options and cast, a selective regenerate's claim, the job deleted.

Every method that writes items first takes the job row's lock (``lock_job``, which
bumps the version: the ETag) and leaves the job's counters equal to its items
(``settle_job``), as the run's fenced moves do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import ColumnElement, and_, case, func, insert, not_, null, select, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import ItemStatus, JobStatus, RunOutcome
from speechbatch.adapters.repositories.cast import CastMoves
from speechbatch.adapters.repositories.jobs import claim_update
from speechbatch.adapters.repositories.tables import COUNTERS, items, jobs, retired_ids, runs
from speechbatch.adapters.repositories.takes import AUDIO_COLUMNS, TakeMoves, takes
from speechbatch.domain.book_source import source_key


@dataclass(frozen=True)
class LockedJob:
    """A job whose row this transaction has locked: what an edit compares against."""

    status: str
    voice: str
    options: str
    organization_id: int


@dataclass(frozen=True)
class KeptTake:
    """A kept take a restore may make current: its text."""

    text: str


class Edits(Protocol):
    """What the editing services need."""

    def lock_job(self, job_id: int, organization_id: int) -> LockedJob | None: ...
    def item_ids(self, job_id: int, wanted: Sequence[int]) -> set[int]: ...
    def edit_item(self, job_id: int, item_id: int, text: str) -> str | None: ...
    def kept_take(self, job_id: int, item_id: int, take: int, keep: int) -> KeptTake | None: ...
    def restore_take(self, job_id: int, item_id: int, take: int) -> list[str]: ...
    def set_voice_and_options(self, job_id: int, voice: str, options: str) -> None: ...
    def mark_other_requests_stale(self, job_id: int, voice: str, options: str) -> None: ...
    def cast_of(self, job_id: int) -> dict[str, str]: ...
    def change_cast(self, job_id: int, changes: Mapping[str, str | None]) -> None: ...
    def mark_speakers_stale(self, job_id: int, speakers: Sequence[str | None]) -> int: ...
    def settle_job(self, job_id: int) -> None: ...
    def claim_selection(
        self,
        job_id: int,
        organization_id: int,
        item_ids: Sequence[int] | None,
        *,
        user_id: int | None,
        worker_id: int | None,
    ) -> tuple[int, int] | None: ...
    def delete_job(self, job_id: int) -> list[str]: ...
    def unreferenced(self, keys: Any, *, keep: str | None = None) -> list[str]: ...


def _count(status: str) -> ColumnElement[int]:
    return (
        select(func.count())
        .where(items.c.job_id == jobs.c.id, items.c.status == status)
        .correlate(jobs)
        .scalar_subquery()
    )


class EditsRepository(TakeMoves, CastMoves):
    """Edits of jobs that are not GENERATING, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def lock_job(self, job_id: int, organization_id: int) -> LockedJob | None:
        """Lock the organization's job row for an edit (bumping its version); None when
        there is no such job. The caller refuses (rolls back) when it is GENERATING."""
        row = self.session.execute(
            update(jobs)
            .where(jobs.c.id == job_id, jobs.c.organization_id == organization_id)
            .values(version=jobs.c.version + 1, updated_at=db_now())
            .returning(jobs.c.status, jobs.c.voice, jobs.c.options, jobs.c.organization_id)
        ).first()
        return None if row is None else LockedJob(row.status, row.voice, row.options, row[3])

    def item_ids(self, job_id: int, wanted: Sequence[int]) -> set[int]:
        """Which of ``wanted`` are items of the job."""
        found: set[int] = set()
        ids = sorted(set(wanted))
        for start in range(0, len(ids), 500):
            found.update(
                self.session.execute(
                    select(items.c.id).where(
                        items.c.job_id == job_id, items.c.id.in_(ids[start : start + 500])
                    )
                ).scalars()
            )
        return found

    def edit_item(self, job_id: int, item_id: int, text: str) -> str | None:
        """Give the item a new text: PENDING, its audio kept and stale, its spoken text
        due to the stale pass. Answers "edited", "unchanged" (a DONE item that already
        says it) or None (no such item)."""
        row = self.session.execute(
            update(items)
            .where(
                items.c.id == item_id,
                items.c.job_id == job_id,
                not_(and_(items.c.text == text, items.c.status == ItemStatus.DONE)),
            )
            .values(
                text=text,
                status=ItemStatus.PENDING,
                error_message=null(),
                stale=items.c.audio_path.is_not(None),
                updated_at=db_now(),
                spoken_version=null(),
            )
            .returning(items.c.id)
        ).first()
        if row is not None:
            self._spoken_texts_due(job_id)
            return "edited"
        exists = self.session.execute(
            select(items.c.id).where(items.c.id == item_id, items.c.job_id == job_id)
        ).first()
        return None if exists is None else "unchanged"

    def kept_take(self, job_id: int, item_id: int, take: int, keep: int) -> KeptTake | None:
        """A take of the job's item that is still kept (among its newest ``keep``)."""
        newest = select(func.max(takes.c.take)).where(takes.c.item_id == item_id).scalar_subquery()
        row = self.session.execute(
            select(takes.c.text)
            .join(items, items.c.id == takes.c.item_id)
            .where(
                items.c.job_id == job_id,
                takes.c.item_id == item_id,
                takes.c.take == take,
                takes.c.take > newest - keep,
            )
        ).first()
        return None if row is None else KeptTake(row.text)

    def restore_take(self, job_id: int, item_id: int, take: int) -> list[str]:
        """Make a kept take the item's audio again (its text too): DONE, no call, not
        stale until the caller judges it (as the stale pass does). Answers the audio it
        replaced when nothing refers to it any more (normally none: a kept take too)."""

        def of_take(column: Any) -> Any:
            return (
                select(column)
                .where(takes.c.item_id == item_id, takes.c.take == take)
                .scalar_subquery()
            )

        replaced = self.session.execute(
            select(items.c.audio_path).where(items.c.id == item_id, items.c.job_id == job_id)
        ).scalar_one_or_none()
        now: str | None = self.session.execute(
            update(items)
            .where(items.c.id == item_id, items.c.job_id == job_id)
            .values(
                text=of_take(takes.c.text),
                status=ItemStatus.DONE,
                error_message=null(),
                **{name: of_take(takes.c[name]) for name in AUDIO_COLUMNS},
                current_take=take,
                stale=False,
                updated_at=db_now(),
                spoken_version=null(),
            )
            .returning(items.c.audio_path)
        ).scalar_one()
        self._spoken_texts_due(job_id)
        return self.unreferenced([replaced], keep=now)

    def _spoken_texts_due(self, job_id: int) -> None:
        """A line's text changed: the stale pass writes its spoken text again."""
        self.session.execute(update(jobs).where(jobs.c.id == job_id).values(spoken_version=null()))

    def set_voice_and_options(self, job_id: int, voice: str, options: str) -> None:
        """Change the job's voice and options (stored JSON) and mark stale every item
        with audio that answers another request now (a speaker of the cast keeps their
        own voice: a new narrator's voice leaves their lines as they are)."""
        self.session.execute(
            update(jobs).where(jobs.c.id == job_id).values(voice=voice, options=options)
        )
        self.mark_other_requests_stale(job_id, voice, options)

    def settle_job(self, job_id: int) -> None:
        """Set the job's counters from its items, and its status from them: COMPLETED
        when every item is DONE, a COMPLETED job with items to send PENDING again."""
        counts = {COUNTERS[s].key: _count(s) for s in COUNTERS}
        not_done = _count(ItemStatus.PENDING) + _count(ItemStatus.ERROR)
        self.session.execute(
            update(jobs)
            .where(jobs.c.id == job_id, jobs.c.status != JobStatus.GENERATING)
            .values(
                **counts,
                status=case(
                    (not_done == 0, JobStatus.COMPLETED),
                    (jobs.c.status == JobStatus.COMPLETED, JobStatus.PENDING),
                    else_=jobs.c.status,
                ),
                error_message=case((not_done == 0, null()), else_=jobs.c.error_message),
            )
        )

    def claim_selection(
        self,
        job_id: int,
        organization_id: int,
        item_ids: Sequence[int] | None,
        *,
        user_id: int | None,
        worker_id: int | None,
    ) -> tuple[int, int] | None:
        """Claim the job for a regenerate of ``item_ids`` (None: every stale item):
        those items go PENDING, picked by this attempt, and the run records how many.
        Answers (attempt, selected), or None when the claim lost (the caller asks
        why); (attempt, 0) when nothing was selected: the caller rolls back."""
        params = {"p_job": job_id, "p_org": organization_id, "p_expected": None}
        attempt = self.session.execute(claim_update(True, jobs.c.attempt), params).scalar()
        if attempt is None:
            return None
        chosen = items.c.stale if item_ids is None else items.c.id.in_(list(item_ids))
        picked = self.session.execute(
            update(items)
            .where(items.c.job_id == job_id, chosen)
            .values(
                status=ItemStatus.PENDING,
                error_message=null(),
                selected_for=attempt,
                updated_at=db_now(),
            )
            .returning(items.c.id)
        ).all()
        counts = {COUNTERS[s].key: _count(s) for s in COUNTERS}
        self.session.execute(update(jobs).where(jobs.c.id == job_id).values(**counts))
        self.session.execute(
            insert(runs).values(
                job_id=job_id,
                attempt=attempt,
                kind="regenerate",
                started_by_id=user_id,
                worker_id=worker_id,
                outcome=RunOutcome.RUNNING,
                selected=len(picked),
                started_at=db_now(),
            )
        )
        return int(attempt), len(picked)

    def delete_job(self, job_id: int) -> list[str]:
        """Delete a job (locked, not GENERATING) with its items, takes and runs; answers
        the keys it referred to (audio, its cover, its kept EPUB) that nothing refers
        to any more."""
        audio: Sequence[str] = (
            self.session.execute(
                select(items.c.audio_path)
                .where(items.c.job_id == job_id, items.c.audio_path.is_not(None))
                .union(
                    select(takes.c.audio_path)
                    .join(items, items.c.id == takes.c.item_id)
                    .where(items.c.job_id == job_id)
                )
            )
            .scalars()
            .all()
        )
        job = self.session.execute(
            select(jobs.c.cover_path, jobs.c.organization_id).where(jobs.c.id == job_id)
        ).first()
        keys = [*audio]
        if job is not None:
            keys += [*([job.cover_path] if job.cover_path else [])]
            keys.append(source_key(job.organization_id, job_id))
        # Children first: SQLite enforces the cascade only with foreign keys on, and
        # the explicit order does not depend on it.
        job_items = select(items.c.id).where(items.c.job_id == job_id)
        self.session.execute(takes.delete().where(takes.c.item_id.in_(job_items)))
        self.session.execute(jobs.delete().where(jobs.c.id == job_id))
        if self.session.get_bind().dialect.name == "sqlite":
            retire = sqlite.insert(retired_ids).values(table_name="jobs", last_id=job_id)
            self.session.execute(
                retire.on_conflict_do_update(
                    index_elements=[retired_ids.c.table_name],
                    set_={"last_id": func.max(retired_ids.c.last_id, retire.excluded.last_id)},
                )
            )
        return self.unreferenced(keys)
