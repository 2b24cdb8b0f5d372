"""An item's fenced moves: start, reuse, DONE, ERROR, back to PENDING.

Every move is two statements in the caller's transaction: the fence, an UPDATE of the
job conditional on GENERATING at the run's attempt (it stamps progress, bumps the
version and moves the progress counters, and takes the job row's lock), then the item's
own UPDATE under the same condition on its status that the counters used. Every writer
of items takes the job's row lock first, so the counters and the items agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Update,
    case,
    exists,
    false,
    literal,
    null,
    select,
    true,
    update,
)
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import ItemStatus
from speechbatch.adapters.repositories.item_statements import (
    DONE_MOVE,
    GENERATING_ONLY,
    ITEM_ID,
    JOB_ID,
    SRC,
    STAMP,
    START_ITEM,
    STARTABLE,
    counter_deltas,
    done_columns,
    fence_update,
    moving_fence,
    old_status,
    this_item,
)
from speechbatch.adapters.repositories.tables import items
from speechbatch.adapters.repositories.takes import TakeMoves, take_number
from speechbatch.config import DEFAULT_TAKES_KEPT


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


class ItemMoves(TakeMoves):
    """Fenced moves of one run's items, over one session (``RunsRepository`` has them)."""

    session: Session

    def stamp_job_progress(self, job_id: int, attempt: int) -> bool:
        """Fence and heartbeat: stamp the job if it is still GENERATING at ``attempt``.

        The UPDATE takes the job row's lock until commit, so recovery and this stamp
        are serialized on that row. False means this run was declared dead or
        superseded: it must write nothing more.
        """
        return self._fence(job_id, attempt, STAMP) is not None

    @property
    def _dialect(self) -> str:
        return self.session.get_bind().dialect.name

    def _fence(self, job_id: int, attempt: int, fence: Update, item_id: int = 0) -> Any:
        """Run ``fence`` (built by ``fence_update``) for the run's attempt and the item:
        its RETURNING row (its extra columns after the job's id), or None when fenced."""
        params = {"b_job_id": job_id, "b_attempt": attempt, "b_item_id": item_id}
        return self.session.execute(fence, params).first()

    def _move(self, job_id: int, attempt: int, item_id: int, fence: Update, move: Update) -> Any:
        """The fence, then ``move`` (an item UPDATE with RETURNING): its row, or None
        when fenced or the item was not in a status the move takes."""
        if self._fence(job_id, attempt, fence, item_id) is None:
            return None
        return self.session.execute(move.where(*this_item(job_id, item_id))).first()

    def start_item(
        self, job_id: int, attempt: int, item_id: int, *, reuse_fingerprint: str | None = None
    ) -> StartedItem | None:
        """Fenced: mark a PENDING or ERROR item GENERATING; None when fenced or taken.

        With ``reuse_fingerprint``, the same statement looks up the newest finished audio
        of that fingerprint (one index probe) and names its item in the answer.
        """
        fence = moving_fence(STARTABLE, ItemStatus.GENERATING, self._dialect)
        fenced = self._fence(job_id, attempt, fence, item_id)
        if fenced is None:
            return None
        row = self.session.execute(
            START_ITEM,
            {"b_job_id": job_id, "b_item_id": item_id, "b_fingerprint": reuse_fingerprint},
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
            SRC.c.id == source_item_id,
            SRC.c.status == ItemStatus.DONE,
            SRC.c.audio_path.is_not(None),
        )

        def of_source(column: Any) -> Any:
            return select(column).where(SRC.c.id == source_item_id).scalar_subquery()

        reusable_from = (*STARTABLE, ItemStatus.GENERATING)
        # The counters move only when the item will: the same conditions as its UPDATE.
        moving = case((source_done, old_status(JOB_ID, ITEM_ID)), else_=literal("-"))
        fence = fence_update(counter_deltas(moving, reusable_from, ItemStatus.DONE))
        if self._fence(job_id, attempt, fence, item_id) is None:
            return FinishedItem(won=False)
        replaced = self._audio_path(job_id, item_id)
        row = self.session.execute(
            update(items)
            .where(*this_item(job_id, item_id), items.c.status.in_(reusable_from), source_done)
            .values(
                status=ItemStatus.DONE,
                error_message=null(),
                reused=true(),
                fingerprint=fingerprint,
                audio_path=of_source(SRC.c.audio_path),
                audio_bytes=of_source(SRC.c.audio_bytes),
                audio_sha256=of_source(SRC.c.audio_sha256),
                duration_seconds=of_source(SRC.c.duration_seconds),
                suspect=of_source(SRC.c.suspect),
                current_take=take_number(item_id, of_source(SRC.c.audio_path)),
                stale=false(),
                updated_at=db_now(),
            )
            .returning(*done_columns(job_id))
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
        timing: str | None = None,
    ) -> FinishedItem:
        """Fenced: move a GENERATING item to DONE (with audio, its measurement, recorded
        as its next take with ``spoken_text`` and ``timing``, see ``record_take``) or ERROR.

        ``replaced_audio_path`` is the audio the item had when it started (its start
        answered it); a DONE finish names it in its answer when nothing refers to it
        any more, with the audio of takes that fell off: the caller deletes them.
        """
        if error_message is not None:
            return self._finish_error(job_id, attempt, item_id, error_message)
        fence = moving_fence(GENERATING_ONLY, ItemStatus.DONE, self._dialect)
        if not self._fence(job_id, attempt, fence, item_id):
            return FinishedItem(won=False)
        done = {"audio_path": audio_path, "audio_bytes": audio_bytes, "fingerprint": fingerprint,
                "audio_sha256": audio_sha256, "duration_seconds": duration_seconds,
                "suspect": suspect}  # fmt: skip
        values = {f"new_{name}": value for name, value in done.items()}
        row = self.session.execute(
            DONE_MOVE, {"b_job_id": job_id, "b_item_id": item_id, **values}
        ).first()
        if row is None:
            return FinishedItem(won=False)
        return self._new_take(item_id, spoken_text, keep, replaced_audio_path, row, timing)

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
            moving_fence(GENERATING_ONLY, status, self._dialect),
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
            select(items.c.audio_path).where(*this_item(job_id, item_id))
        ).scalar_one_or_none()

    def _new_take(
        self,
        item_id: int,
        spoken_text: str | None,
        keep: int,
        replaced: str | None,
        done: Any,
        timing: str | None = None,
    ) -> FinishedItem:
        """The item's new audio (``done``: its DONE move's row, with ``audio_path`` and
        ``current_take``) as its take; the won finish's answer, with the audio nothing
        refers to any more (``replaced``, takes that fell off)."""
        dropped = self.record_take(item_id, spoken_text, keep, done.current_take, timing)
        orphaned = self.unreferenced([replaced, *dropped], keep=done.audio_path)
        return FinishedItem(True, tuple(orphaned), done.text, int(done.lexicon_version))

    def mark_stale(self, job_id: int, item_id: int) -> None:
        """Mark an item that has just become DONE stale: its run's rules were older than
        the organization's, and the newer ones give another spoken text."""
        self.session.execute(update(items).where(*this_item(job_id, item_id)).values(stale=true()))
