"""A run's fenced moves: start and finish items, end the run.

Every move of an item keeps the job row's progress counters in the same statement that
fences it (the UPDATE of the job, which takes its row lock), so no extra statement runs
per item; every write of the job row bumps its ``version``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import (
    ColumnElement,
    Integer,
    String,
    Text,
    and_,
    bindparam,
    case,
    cast,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from ..db import db_now
from ..models import Id, ItemStatus, JobStatus, RunOutcome
from .jobs import fail_in_flight_counters, not_done_items, total_items
from .tables import COUNTERS, items, jobs, runs


@dataclass(frozen=True)
class StartedItem:
    """What a run needs to send an item it has just marked GENERATING."""

    text: str
    previous_audio_path: str | None
    # An item of the organization whose finished audio answers the same request.
    reusable_item_id: int | None = None


@dataclass(frozen=True)
class FinishedItem:
    """The answer of a fenced finish: whether it won, and whether what it replaced is
    still shared by another item."""

    won: bool
    replaced_still_referenced: bool = False

    def __bool__(self) -> bool:
        return self.won


@dataclass(frozen=True)
class RunPlan:
    """What a run needs before its first item: the job's voice and organization, whether
    it regenerates, and the (id, text) of the items to send, in order."""

    voice: str
    organization_id: int
    regenerate: bool
    items: list[tuple[int, str]]


# Items a run may start: a retry resumes ERROR items without resetting them at the claim.
STARTABLE = (ItemStatus.PENDING, ItemStatus.ERROR)


def counters_after_moving(
    old_status: ColumnElement[str], from_statuses: Sequence[str], to_status: str
) -> dict[str, ColumnElement[int]]:
    """Counter assignments for one item moving from ``old_status`` (if it is one of
    ``from_statuses``) to ``to_status``; nothing changes when it is not."""
    moving = old_status.in_(from_statuses)
    values: dict[str, ColumnElement[int]] = {}
    for status, column in COUNTERS.items():
        if status == to_status:
            values[column.key] = column + case((moving, 1), else_=0)
        elif status in from_statuses:
            values[column.key] = column - case((old_status == status, 1), else_=0)
    return values


class Runs(Protocol):
    """What the runner needs: the fence and the fenced moves of one run."""

    def run_plan(self, job_id: int, attempt: int) -> RunPlan: ...
    def stamp_job_progress(self, job_id: int, attempt: int) -> bool: ...
    def start_item(
        self, job_id: int, attempt: int, item_id: int, *, reuse_fingerprint: str | None = None
    ) -> StartedItem | None: ...
    def reuse_audio(
        self, job_id: int, attempt: int, item_id: int, source_item_id: int, fingerprint: str
    ) -> bool: ...
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
    ) -> FinishedItem: ...
    def return_item(self, job_id: int, attempt: int, item_id: int) -> bool: ...
    def finish_run(
        self,
        job_id: int,
        attempt: int,
        *,
        run_error: str | None = None,
        over_budget: str | None = None,
    ) -> str | None: ...
    def interrupt_run(self, job_id: int, attempt: int, message: str) -> bool: ...
    def live_attempt(self, job_id: int, organization_id: int) -> int | None: ...
    def cancel_run(self, job_id: int, attempt: int, user_id: int | None, message: str) -> bool: ...


class RunsRepository:
    """Fenced compare-and-sets of a run, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._dialect = session.get_bind().dialect.name

    def run_plan(self, job_id: int, attempt: int) -> RunPlan:
        """The job's voice and organization, whether the run at ``attempt`` regenerates,
        and the (id, text) of the items it must still send (not DONE), in order."""
        job = self.session.execute(
            select(jobs.c.voice, jobs.c.organization_id, runs.c.kind)
            .select_from(jobs)
            .outerjoin(runs, and_(runs.c.job_id == jobs.c.id, runs.c.attempt == attempt))
            .where(jobs.c.id == job_id)
        ).one()
        startable = self.session.execute(
            select(items.c.id, items.c.text)
            .where(items.c.job_id == job_id, items.c.status.in_(STARTABLE))
            .order_by(items.c.position)
        ).all()
        return RunPlan(
            job.voice,
            job.organization_id,
            job.kind == "regenerate",
            [(r.id, r.text) for r in startable],
        )

    def stamp_job_progress(self, job_id: int, attempt: int) -> bool:
        """Fence and heartbeat: stamp the job if it is still GENERATING at ``attempt``.

        The UPDATE takes the job row's lock until commit, so recovery and this stamp
        are serialized on that row. False means this run was declared dead or
        superseded: it must write nothing more.
        """
        (stamp,) = _item_statements(self._dialect)["stamp"]
        return (
            self.session.execute(stamp, {"p_job": job_id, "p_attempt": attempt}).first() is not None
        )

    def _move(self, kind: str, params: dict[str, Any]) -> bool:
        """Fence, stamp and count in one UPDATE of the job, then move the item itself.

        Both use the same condition on the item's status, and every writer of items
        takes the job's row lock first, so the counters and the item agree.
        """
        return self._fenced_move(kind, params) is not None

    def _fenced_move(self, kind: str, params: dict[str, Any]) -> Any:
        """The move's RETURNING row, or None when fenced or the item was not movable.

        On PostgreSQL the fence is a data-modifying CTE of the move: one round trip, and
        the job's row is locked (the CTE runs first, as the move's one-time filter) for
        one statement less. SQLite runs the two statements in turn.
        """
        statements = _item_statements(self._dialect)[kind]
        if len(statements) == 1:
            return self.session.execute(statements[0], params).first()
        fence, move = statements
        if self.session.execute(fence, params).first() is None:
            return None
        return self.session.execute(move, params).first()

    def start_item(
        self, job_id: int, attempt: int, item_id: int, *, reuse_fingerprint: str | None = None
    ) -> StartedItem | None:
        """Fenced: mark a PENDING or ERROR item GENERATING; None when fenced or taken.

        With ``reuse_fingerprint``, the same statement looks up the newest finished audio
        of that fingerprint (one index probe) and names its item in the answer.
        """
        params = {
            "p_job": job_id,
            "p_attempt": attempt,
            "p_item": item_id,
            "p_fp": reuse_fingerprint,
        }
        row = self._fenced_move("start", params)
        if row is None:
            return None
        return StartedItem(
            text=row.text, previous_audio_path=row.audio_path, reusable_item_id=row.reusable_id
        )

    def reuse_audio(
        self, job_id: int, attempt: int, item_id: int, source_item_id: int, fingerprint: str
    ) -> bool:
        """Fenced: make a PENDING, ERROR or GENERATING item DONE with another item's audio.

        False when fenced, when the item was not ours to finish, or when the source has
        no finished audio any more (the counters then do not move either).
        """
        params = {
            "p_job": job_id,
            "p_attempt": attempt,
            "p_item": item_id,
            "p_src": source_item_id,
            "p_fp": fingerprint,
        }
        return self._move("reuse", params)

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
    ) -> FinishedItem:
        """Fenced: move a GENERATING item to DONE (with audio) or ERROR.

        With ``replaced_audio_path`` (the audio a regenerate replaces), the answer also
        says, from the same statement, whether any other item still refers to that file.
        """
        params: dict[str, Any] = {"p_job": job_id, "p_attempt": attempt, "p_item": item_id}
        kind = "error"
        if error_message is None:
            kind = "done"
            params.update(
                p_path=audio_path,
                p_bytes=audio_bytes,
                p_sha=audio_sha256,
                p_fp=fingerprint,
                p_old=replaced_audio_path,
            )
        else:
            params["p_message"] = error_message
        row = self._fenced_move(kind, params)
        if row is None:
            return FinishedItem(won=False)
        return FinishedItem(won=True, replaced_still_referenced=bool(row.still_referenced))

    def return_item(self, job_id: int, attempt: int, item_id: int) -> bool:
        """Fenced: put a GENERATING item back to PENDING (its next call did not fit the budget)."""
        return self._move("return", {"p_job": job_id, "p_attempt": attempt, "p_item": item_id})

    def end_run(
        self, job_id: int, attempt: int, outcome: str, message: str | None, **extra: Any
    ) -> None:
        """Record how a run ended (only while it is still RUNNING)."""
        self.session.execute(
            update(runs)
            .where(
                runs.c.job_id == job_id,
                runs.c.attempt == attempt,
                runs.c.outcome == RunOutcome.RUNNING,
            )
            .values(outcome=outcome, finished_at=db_now(), error_message=message, **extra)
        )

    def fail_in_flight_items(self, job_id: int, message: str) -> None:
        """Move the job's GENERATING items to ERROR (the caller moved the counters)."""
        self.session.execute(
            update(items)
            .where(items.c.job_id == job_id, items.c.status == ItemStatus.GENERATING)
            .values(status=ItemStatus.ERROR, error_message=message, updated_at=db_now())
        )

    def end_job(
        self,
        job_id: int,
        attempt: int,
        failure_message: str | ColumnElement[str],
        *extra: ColumnElement[bool],
        fail_in_flight: bool = False,
        return_in_flight: bool = False,
    ) -> tuple[str, str | None] | None:
        """Conditionally end a GENERATING job: COMPLETED when every item is DONE.

        Returns the job's (status, error_message), or None when it was not GENERATING
        at ``attempt`` (fenced). With ``fail_in_flight`` the counters already count the
        in-flight items as ERROR, with ``return_in_flight`` as PENDING; the caller then
        moves the items themselves.
        """
        not_done = not_done_items() > 0
        now = db_now()
        values: dict[str, Any] = {
            "status": case((not_done, JobStatus.FAILED), else_=JobStatus.COMPLETED),
            "error_message": case((not_done, failure_message), else_=None),
            "finished_at": now,
            "updated_at": now,
            "version": jobs.c.version + 1,
        }
        if fail_in_flight:
            values.update(fail_in_flight_counters())
        if return_in_flight:
            values.update(
                {
                    jobs.c.items_pending.key: jobs.c.items_pending + jobs.c.items_generating,
                    jobs.c.items_generating.key: literal(0),
                }
            )
        row = self.session.execute(
            update(jobs)
            .where(
                jobs.c.id == job_id,
                jobs.c.status == JobStatus.GENERATING,
                jobs.c.attempt == attempt,
                *extra,
            )
            .values(**values)
            .returning(jobs.c.status, jobs.c.error_message)
        ).first()
        return None if row is None else (row.status, row.error_message)

    def finish_run(
        self,
        job_id: int,
        attempt: int,
        *,
        run_error: str | None = None,
        over_budget: str | None = None,
    ) -> str | None:
        """Fenced: end a run whose loop is over; return the job's final status or None.

        ``over_budget`` (a message) ends a run that stopped because the organization's
        budget could not pay for its next call: outcome OVER_BUDGET unless every item
        is DONE anyway.
        """
        message: str | ColumnElement[str] = (
            run_error
            or over_budget
            or (
                cast(not_done_items(), String)
                + literal(" of ")
                + cast(total_items(), String)
                + literal(" items failed")
            )
        )
        ended = self.end_job(job_id, attempt, message)
        if ended is None:
            return None
        status, error = ended
        if status == JobStatus.COMPLETED:
            self.end_run(job_id, attempt, RunOutcome.COMPLETED, None)
        elif over_budget and not run_error:
            self.end_run(job_id, attempt, RunOutcome.OVER_BUDGET, error)
        else:
            self.end_run(job_id, attempt, RunOutcome.FAILED, error)
        return status

    def interrupt_run(self, job_id: int, attempt: int, message: str) -> bool:
        """Fenced: end a run stopped on purpose (SIGTERM); the job becomes retryable."""
        if self.end_job(job_id, attempt, message, fail_in_flight=True) is None:
            return False
        self.fail_in_flight_items(job_id, message)
        self.end_run(job_id, attempt, RunOutcome.INTERRUPTED, message)
        return True

    def live_attempt(self, job_id: int, organization_id: int) -> int | None:
        """The attempt of the job's live run, or None when it is not GENERATING (or not found)."""
        return self.session.execute(
            select(jobs.c.attempt).where(
                jobs.c.id == job_id,
                jobs.c.organization_id == organization_id,
                jobs.c.status == JobStatus.GENERATING,
            )
        ).scalar_one_or_none()

    def cancel_run(self, job_id: int, attempt: int, user_id: int | None, message: str) -> bool:
        """Compare-and-set: end the live run at ``attempt`` as CANCELLED; whether it won.

        The claim's mirror: one conditional UPDATE of the job at the run's attempt (its
        row lock serializes it with every fenced write), after which the run's next
        fenced write fails and it stops. Items in flight go back to PENDING, so a
        Retry resumes them; their calls' answers cannot be written.
        """
        if self.end_job(job_id, attempt, message, return_in_flight=True) is None:
            return False
        self.session.execute(
            update(items)
            .where(items.c.job_id == job_id, items.c.status == ItemStatus.GENERATING)
            .values(status=ItemStatus.PENDING, updated_at=db_now())
        )
        self.end_run(job_id, attempt, RunOutcome.CANCELLED, message, cancelled_by_id=user_id)
        return True


@functools.cache
def _item_statements(dialect: str) -> dict[str, tuple[Any, ...]]:
    """The run's per-item statements, built once per dialect: they run for every item.

    Each move is a fence and a move: the fence is the job's UPDATE (stamp, counters,
    version) conditional on GENERATING at ``p_attempt``; the move is the item's own
    UPDATE under the same condition on its status that the counters used. On PostgreSQL
    they are one statement (see ``fenced`` below), elsewhere two run in turn.
    """
    job_id, item_id = bindparam("p_job", type_=Id), bindparam("p_item", type_=Id)
    this_item = (items.c.id == item_id, items.c.job_id == job_id)
    path, sha = bindparam("p_path", type_=String), bindparam("p_sha", type_=String)
    old_status = select(items.c.status).where(*this_item).scalar_subquery()
    fingerprint = bindparam("p_fp", type_=String)
    src = items.alias("src")
    source_id = bindparam("p_src", type_=Id)
    # The newest finished audio of a fingerprint: one probe of ix_items_fingerprint_updated_at.
    reusable = (
        select(src.c.id)
        .where(
            src.c.fingerprint == fingerprint,
            src.c.status == ItemStatus.DONE,
            src.c.audio_path.is_not(None),
        )
        .order_by(src.c.updated_at.desc())
        .limit(1)
        .scalar_subquery()
    )
    source_done = (
        select(src.c.id)
        .where(
            src.c.id == source_id,
            src.c.status == ItemStatus.DONE,
            src.c.audio_path.is_not(None),
        )
        .exists()
    )

    def of_source(column: Any) -> Any:
        return select(column).where(src.c.id == source_id).scalar_subquery()

    reusable_from = (*STARTABLE, ItemStatus.GENERATING)
    # The counters move for a reuse only when the item will: same conditions as its UPDATE.
    reuse_status = case((source_done, old_status), else_=literal("-"))

    def fence(**counters: Any) -> Any:
        return (
            update(jobs)
            .where(
                jobs.c.id == job_id,
                jobs.c.status == JobStatus.GENERATING,
                jobs.c.attempt == bindparam("p_attempt", type_=Integer),
            )
            .values(updated_at=db_now(), version=jobs.c.version + 1, **counters)
            .returning(jobs.c.id)
        )

    def fenced(fence: Any, move: Any) -> tuple[Any, ...]:
        if dialect != "postgresql":
            return fence, move
        # The move happens only if the fence won. An uncorrelated EXISTS is the move's
        # one-time filter, evaluated before the item is scanned (EXPLAIN: "Result,
        # One-Time Filter: $n" over the items scan, $n the CTE scan of the fence): the
        # job's row is locked first, the lock order of every other writer of items.
        won = fence.cte("fence")
        return (move.where(select(won.c.id).exists()),)

    generating = (ItemStatus.GENERATING,)
    return {
        "stamp": (fence(),),
        "start": fenced(
            fence(**counters_after_moving(old_status, STARTABLE, ItemStatus.GENERATING)),
            update(items)
            .where(*this_item, items.c.status.in_(STARTABLE))
            .values(status=ItemStatus.GENERATING, error_message=None, updated_at=db_now())
            .returning(items.c.text, items.c.audio_path, reusable.label("reusable_id")),
        ),
        "reuse": fenced(
            fence(**counters_after_moving(reuse_status, reusable_from, ItemStatus.DONE)),
            update(items)
            .where(*this_item, items.c.status.in_(reusable_from), source_done)
            .values(
                status=ItemStatus.DONE,
                error_message=None,
                reused=True,
                fingerprint=fingerprint,
                audio_path=of_source(src.c.audio_path),
                audio_bytes=of_source(src.c.audio_bytes),
                audio_sha256=of_source(src.c.audio_sha256),
                updated_at=db_now(),
            )
            .returning(items.c.id),
        ),
        "return": fenced(
            fence(**counters_after_moving(old_status, generating, ItemStatus.PENDING)),
            update(items)
            .where(*this_item, items.c.status == ItemStatus.GENERATING)
            .values(status=ItemStatus.PENDING, updated_at=db_now())
            .returning(items.c.id),
        ),
        "done": fenced(
            fence(**counters_after_moving(old_status, generating, ItemStatus.DONE)),
            update(items)
            .where(
                *this_item,
                or_(
                    items.c.status == ItemStatus.GENERATING,
                    # The same write again (a retry after a lost commit ack) wins again;
                    # the counters did not move for it.
                    and_(
                        items.c.status == ItemStatus.DONE,
                        items.c.audio_path == path,
                        items.c.audio_sha256 == sha,
                    ),
                ),
            )
            .values(
                status=ItemStatus.DONE,
                error_message=None,
                audio_path=path,
                audio_bytes=bindparam("p_bytes", type_=Integer),
                audio_sha256=sha,
                fingerprint=fingerprint,
                reused=False,
                updated_at=db_now(),
            )
            .returning(
                items.c.id,
                # Whether the audio this one replaces is still shared by another item.
                select(src.c.id)
                .where(src.c.audio_path == bindparam("p_old", type_=String), src.c.id != item_id)
                .exists()
                .label("still_referenced"),
            ),
        ),
        "error": fenced(
            fence(**counters_after_moving(old_status, generating, ItemStatus.ERROR)),
            update(items)
            .where(*this_item, items.c.status == ItemStatus.GENERATING)
            .values(
                status=ItemStatus.ERROR,
                error_message=bindparam("p_message", type_=Text),
                updated_at=db_now(),
            )
            .returning(items.c.id, literal(False).label("still_referenced")),
        ),
    }
