"""An item's fenced moves: start, reuse, DONE, ERROR, back to PENDING.

Every move is two statements in the caller's transaction: the fence, an UPDATE of the
job conditional on GENERATING at the run's attempt (it stamps progress, bumps the
version and moves the progress counters, and takes the job row's lock), then the item's
own UPDATE under the same condition on its status that the counters used. Every writer
of items takes the job's row lock first, so the counters and the items agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Update,
    and_,
    case,
    exists,
    false,
    literal,
    null,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import ItemStatus, JobStatus
from speechbatch.adapters.repositories.channels import share_notice
from speechbatch.adapters.repositories.lexicon import lexicon_version_of
from speechbatch.adapters.repositories.tables import COUNTERS, items, jobs
from speechbatch.adapters.repositories.takes import TakeMoves, take_number
from speechbatch.config import DEFAULT_TAKES_KEPT

# Items a run may start: a retry resumes ERROR items without resetting them at the claim.
STARTABLE = (ItemStatus.PENDING, ItemStatus.ERROR)
_GENERATING = (ItemStatus.GENERATING,)
_SRC = items.alias("src")


@dataclass(frozen=True)
class StartedItem:
    """What a run needs to send an item it has just marked GENERATING."""

    text: str
    previous_audio_path: str | None
    # An item of the organization whose finished audio answers the same request.
    reusable_item_id: int | None = None
    # The job has no item left to start: fair shares may have grown.
    drained: bool = False


@dataclass(frozen=True)
class FinishedItem:
    """The answer of a fenced finish: whether it won, and the audio (it replaced, or of
    takes that fell off) that nothing refers to any more: the caller deletes those
    files once committed."""

    won: bool
    orphaned_audio_paths: tuple[str, ...] = ()
    # The item's text and its organization's lexicon version, read after the fence:
    # a run whose rules are older checks whether its spoken text is still right.
    text: str = ""
    lexicon_version: int = 0

    def __bool__(self) -> bool:
        return self.won


def counter_deltas(
    old_status: ColumnElement[str], from_statuses: Sequence[str], to_status: str
) -> dict[str, ColumnElement[int]]:
    """Per counter: what it gains when one item moves from ``old_status`` (if it is one of
    ``from_statuses``) to ``to_status`` (negative for the status it leaves); nothing
    changes when it is not."""
    deltas: dict[str, ColumnElement[int]] = {}
    for status, column in COUNTERS.items():
        if status == to_status:
            deltas[column.key] = case((old_status.in_(from_statuses), 1), else_=0)
        elif status in from_statuses:
            deltas[column.key] = case((old_status == status, -1), else_=0)
    return deltas


class ItemMoves(TakeMoves):
    """Fenced moves of one run's items, over one session (``RunsRepository`` has them)."""

    session: Session

    def stamp_job_progress(self, job_id: int, attempt: int) -> bool:
        """Fence and heartbeat: stamp the job if it is still GENERATING at ``attempt``.

        The UPDATE takes the job row's lock until commit, so recovery and this stamp
        are serialized on that row. False means this run was declared dead or
        superseded: it must write nothing more.
        """
        return self._fence(job_id, attempt, {}) is not None

    def _fence(
        self, job_id: int, attempt: int, deltas: dict[str, ColumnElement[int]], *extra: Any
    ) -> Any:
        """The job row at the run's attempt, counters moved: its RETURNING row (``extra``
        columns after its id), or None when fenced."""
        values: dict[str, Any] = {key: jobs.c[key] + delta for key, delta in deltas.items()}
        row = self.session.execute(
            update(jobs)
            .where(
                jobs.c.id == job_id,
                jobs.c.status == JobStatus.GENERATING,
                jobs.c.attempt == attempt,
            )
            .values(updated_at=db_now(), version=jobs.c.version + 1, **values)
            .returning(jobs.c.id, *extra)
        ).first()
        return row

    def _move(
        self,
        job_id: int,
        attempt: int,
        item_id: int,
        deltas: dict[str, ColumnElement[int]],
        move: Update,
    ) -> Any:
        """The fence, then ``move`` (an item UPDATE with RETURNING): its row, or None
        when fenced or the item was not in a status the move takes."""
        if self._fence(job_id, attempt, deltas) is None:
            return None
        return self.session.execute(move.where(*_this_item(job_id, item_id))).first()

    def start_item(
        self, job_id: int, attempt: int, item_id: int, *, reuse_fingerprint: str | None = None
    ) -> StartedItem | None:
        """Fenced: mark a PENDING or ERROR item GENERATING; None when fenced or taken.

        With ``reuse_fingerprint``, the same statement looks up the newest finished audio
        of that fingerprint (one index probe) and names its item in the answer.
        """
        reusable = (
            select(_SRC.c.id)
            .where(
                _SRC.c.fingerprint == reuse_fingerprint,
                _SRC.c.status == ItemStatus.DONE,
                _SRC.c.audio_path.is_not(None),
            )
            .order_by(_SRC.c.updated_at.desc())
            .limit(1)
            .scalar_subquery()
        )
        # After this start, whether the job has no item left to start: its fair share of
        # slots goes to the other jobs (told to every process at commit).
        drained = jobs.c.items_pending + jobs.c.items_error == 0
        fenced = self._fence(
            job_id,
            attempt,
            counter_deltas(_old_status(job_id, item_id), STARTABLE, ItemStatus.GENERATING),
            drained.label("drained"),
            *share_notice(self.session, drained),
        )
        if fenced is None:
            return None
        row = self.session.execute(
            update(items)
            .where(*_this_item(job_id, item_id), items.c.status.in_(STARTABLE))
            .values(status=ItemStatus.GENERATING, error_message=null(), updated_at=db_now())
            .returning(items.c.text, items.c.audio_path, reusable.label("reusable_id"))
        ).first()
        if row is None:
            return None
        reusable_id = row.reusable_id if reuse_fingerprint is not None else None
        return StartedItem(row.text, row.audio_path, reusable_id, drained=bool(fenced.drained))

    def reuse_audio(
        self,
        job_id: int,
        attempt: int,
        item_id: int,
        source_item_id: int,
        fingerprint: str,
        *,
        spoken_text: str | None = None,
        keep: int = DEFAULT_TAKES_KEPT,
    ) -> FinishedItem:
        """Fenced: make a PENDING, ERROR or GENERATING item DONE with another item's audio
        (and its measurement), recorded as the item's next take (see ``record_take``).

        Loses when fenced, when the item was not ours to finish, or when the source has
        no finished audio any more (the counters then do not move either).
        """
        source_done = exists().where(
            _SRC.c.id == source_item_id,
            _SRC.c.status == ItemStatus.DONE,
            _SRC.c.audio_path.is_not(None),
        )

        def of_source(column: Any) -> Any:
            return select(column).where(_SRC.c.id == source_item_id).scalar_subquery()

        reusable_from = (*STARTABLE, ItemStatus.GENERATING)
        # The counters move only when the item will: the same conditions as its UPDATE.
        old_status = case((source_done, _old_status(job_id, item_id)), else_=literal("-"))
        if self._fence(job_id, attempt, counter_deltas(old_status, reusable_from, "DONE")) is None:
            return FinishedItem(won=False)
        replaced = self._audio_path(job_id, item_id)
        row = self.session.execute(
            update(items)
            .where(*_this_item(job_id, item_id), items.c.status.in_(reusable_from), source_done)
            .values(
                status=ItemStatus.DONE,
                error_message=null(),
                reused=true(),
                fingerprint=fingerprint,
                audio_path=of_source(_SRC.c.audio_path),
                audio_bytes=of_source(_SRC.c.audio_bytes),
                audio_sha256=of_source(_SRC.c.audio_sha256),
                duration_seconds=of_source(_SRC.c.duration_seconds),
                suspect=of_source(_SRC.c.suspect),
                current_take=take_number(item_id, of_source(_SRC.c.audio_path)),
                stale=false(),
                updated_at=db_now(),
            )
            .returning(*_done_columns(job_id))
        ).first()
        if row is None:
            return FinishedItem(won=False)
        return self._new_take(item_id, spoken_text, keep, replaced, row)

    def finish_item(
        self,
        job_id: int,
        attempt: int,
        item_id: int,
        *,
        audio_path: str | None = None,
        audio_bytes: int | None = None,
        audio_sha256: str | None = None,
        fingerprint: str | None = None,
        replaced_audio_path: str | None = None,
        error_message: str | None = None,
        duration_seconds: float | None = None,
        suspect: str | None = None,
        spoken_text: str | None = None,
        keep: int = DEFAULT_TAKES_KEPT,
    ) -> FinishedItem:
        """Fenced: move a GENERATING item to DONE (with audio, its measurement, recorded
        as its next take with ``spoken_text``, see ``record_take``) or ERROR.

        ``replaced_audio_path`` is the audio the item had when it started (its start
        answered it); a DONE finish names it in its answer when nothing refers to it
        any more, with the audio of takes that fell off: the caller deletes them.
        """
        if error_message is not None:
            return self._finish_error(job_id, attempt, item_id, error_message)
        if not self._fence(
            job_id,
            attempt,
            counter_deltas(_old_status(job_id, item_id), _GENERATING, ItemStatus.DONE),
        ):
            return FinishedItem(won=False)
        done = {"audio_path": audio_path, "audio_bytes": audio_bytes, "fingerprint": fingerprint,
                "audio_sha256": audio_sha256, "duration_seconds": duration_seconds,
                "suspect": suspect}  # fmt: skip
        row = self.session.execute(_done_update(job_id, item_id, done)).first()
        if row is None:
            return FinishedItem(won=False)
        return self._new_take(item_id, spoken_text, keep, replaced_audio_path, row)

    def _finish_error(
        self, job_id: int, attempt: int, item_id: int, error_message: str
    ) -> FinishedItem:
        won = self._from_generating(
            job_id, attempt, item_id, ItemStatus.ERROR, error_message=error_message
        )
        return FinishedItem(won=won)

    def return_item(self, job_id: int, attempt: int, item_id: int) -> bool:
        """Fenced: put a GENERATING item back to PENDING (it was not sent)."""
        return self._from_generating(job_id, attempt, item_id, ItemStatus.PENDING)

    def _from_generating(
        self, job_id: int, attempt: int, item_id: int, status: ItemStatus, **values: Any
    ) -> bool:
        """Fenced: move a GENERATING item to ``status`` (no audio); whether it moved."""
        row = self._move(
            job_id,
            attempt,
            item_id,
            counter_deltas(_old_status(job_id, item_id), _GENERATING, status),
            update(items)
            .where(items.c.status == ItemStatus.GENERATING)
            .values(status=status, updated_at=db_now(), **values)
            .returning(items.c.id),
        )
        return row is not None

    def _audio_path(self, job_id: int, item_id: int) -> str | None:
        """The item's audio now (read under the job's row lock, which every writer of
        its items takes first)."""
        return self.session.execute(
            select(items.c.audio_path).where(*_this_item(job_id, item_id))
        ).scalar_one_or_none()

    def _new_take(
        self,
        item_id: int,
        spoken_text: str | None,
        keep: int,
        replaced: str | None,
        done: Any,
    ) -> FinishedItem:
        """The item's new audio (``done``: its DONE move's row, with ``audio_path`` and
        ``current_take``) as its take; the won finish's answer, with the audio nothing
        refers to any more (``replaced``, takes that fell off)."""
        dropped = self.record_take(item_id, spoken_text, keep, done.current_take)
        orphaned = self.unreferenced([replaced, *dropped], keep=done.audio_path)
        return FinishedItem(True, tuple(orphaned), done.text, int(done.lexicon_version))

    def mark_stale(self, job_id: int, item_id: int) -> None:
        """Mark an item that has just become DONE stale: its run's rules were older than
        the organization's, and the newer ones give another spoken text."""
        self.session.execute(update(items).where(*_this_item(job_id, item_id)).values(stale=true()))


def _done_update(job_id: int, item_id: int, done: dict[str, Any]) -> Update:
    """A GENERATING item to DONE with ``done`` (its audio and measurement)."""
    return (
        update(items)
        .where(
            *_this_item(job_id, item_id),
            or_(
                items.c.status == ItemStatus.GENERATING,
                # The same write again (a retry after a lost commit ack) wins again;
                # the counters did not move for it.
                and_(
                    items.c.status == ItemStatus.DONE,
                    items.c.audio_path == done["audio_path"],
                    items.c.audio_sha256 == done["audio_sha256"],
                ),
            ),
        )
        .values(
            status=ItemStatus.DONE,
            error_message=null(),
            reused=false(),
            stale=false(),
            current_take=take_number(item_id, done["audio_path"]),
            updated_at=db_now(),
            **done,
        )
        .returning(*_done_columns(job_id))
    )


def _done_columns(job_id: int) -> tuple[Any, ...]:
    """What a DONE move answers. Its statement runs after the fence took the job row's
    lock, so the lexicon version it reads is at least the one a stale pass that has
    already marked this job's items used (see ``repositories/lexicon.py``)."""
    organization = select(jobs.c.organization_id).where(jobs.c.id == job_id).scalar_subquery()
    return (
        items.c.audio_path,
        items.c.current_take,
        items.c.text,
        lexicon_version_of(organization).label("lexicon_version"),
    )


def _this_item(job_id: int, item_id: int) -> tuple[ColumnElement[bool], ...]:
    return (items.c.id == item_id, items.c.job_id == job_id)


def _old_status(job_id: int, item_id: int) -> ColumnElement[str]:
    return select(items.c.status).where(*_this_item(job_id, item_id)).scalar_subquery()
