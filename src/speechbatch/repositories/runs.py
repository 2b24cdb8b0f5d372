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
    false,
    literal,
    null,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql.selectable import TextualSelect

from ..db import const, db_now, one_of
from ..models import Id, ItemStatus, JobStatus, RunOutcome
from .jobs import fail_in_flight_counters, not_done_items, total_items
from .spending import Bill, CallBill, bill_ctes
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
class DoneItem:
    """A sent item whose audio is stored: what its DONE finish records."""

    item_id: int
    audio_path: str | None
    audio_bytes: int | None
    audio_sha256: str | None
    fingerprint: str | None = None
    # The audio a regenerate replaces (deleted once no other item refers to it).
    replaced_audio_path: str | None = None


def _done_params(job_id: int, attempt: int, done: DoneItem) -> dict[str, Any]:
    return {
        "p_job": job_id,
        "p_attempt": attempt,
        "p_item": done.item_id,
        "p_path": done.audio_path,
        "p_bytes": done.audio_bytes,
        "p_sha": done.audio_sha256,
        "p_fp": done.fingerprint,
        "p_old": done.replaced_audio_path,
    }


def _started(row: Any) -> StartedItem | None:
    if row is None:
        return None
    return StartedItem(
        text=row.text, previous_audio_path=row.audio_path, reusable_item_id=row.reusable_id
    )


def _finished(row: Any) -> FinishedItem:
    if row is None:
        return FinishedItem(won=False)
    return FinishedItem(won=True, replaced_still_referenced=bool(row.still_referenced))


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


def counter_deltas(
    old_status: ColumnElement[str], from_statuses: Sequence[str], to_status: str
) -> dict[str, ColumnElement[int]]:
    """Per counter: what it gains when one item moves from ``old_status`` (if it is one of
    ``from_statuses``) to ``to_status`` (negative for the status it leaves); nothing
    changes when it is not."""
    deltas: dict[str, ColumnElement[int]] = {}
    for status, column in COUNTERS.items():
        if status == to_status:
            deltas[column.key] = case((one_of(old_status, from_statuses), const(1)), else_=const(0))
        elif status in from_statuses:
            deltas[column.key] = case((old_status == const(status), const(-1)), else_=const(0))
    return deltas


def counters_after(*moves: dict[str, ColumnElement[int]]) -> dict[str, ColumnElement[int]]:
    """The job's counter assignments for the moves of one fenced statement."""
    values: dict[str, ColumnElement[int]] = {}
    for deltas in moves:
        for key, delta in deltas.items():
            values[key] = values.get(key, jobs.c[key]) + delta
    return values


class Runs(Protocol):
    """What the runner needs: the fence and the fenced moves of one run."""

    def run_plan(self, job_id: int, attempt: int) -> RunPlan: ...
    def stamp_job_progress(self, job_id: int, attempt: int) -> bool: ...
    def start_item(
        self, job_id: int, attempt: int, item_id: int, *, reuse_fingerprint: str | None = None
    ) -> StartedItem | None: ...
    def finish_and_start_item(
        self,
        job_id: int,
        attempt: int,
        done: DoneItem,
        item_id: int,
        *,
        reuse_fingerprint: str | None = None,
        bill: CallBill | None = None,
    ) -> tuple[FinishedItem, StartedItem | None, Bill | None]: ...
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
    def finish_done(self, job_id: int, attempt: int, done: DoneItem) -> FinishedItem: ...
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
        return _started(self._fenced_move("start", params))

    def finish_and_start_item(
        self,
        job_id: int,
        attempt: int,
        done: DoneItem,
        item_id: int,
        *,
        reuse_fingerprint: str | None = None,
        bill: CallBill | None = None,
    ) -> tuple[FinishedItem, StartedItem | None, Bill | None]:
        """Fenced: ``done``'s DONE finish and the start of ``item_id`` under one fence,
        which writes the job's row (stamp and counters) once for both: what
        ``finish_item`` and then ``start_item`` answer, one statement fewer.

        The start is None when its item was not startable (the finish still won); both
        lose when fenced. A finish that lost while its start won (the fence held, so it
        was not this run's item to finish) must be rolled back by the caller.

        With ``bill``, the started item's call is billed too (and its rider carried)
        when the start found no reusable audio: on PostgreSQL within the same statement,
        elsewhere right after it. The third answer is that ``Bill`` (falsy when the call
        did not fit the budget: the caller rolls back), or None when nothing was billed.
        """
        params = {
            **_done_params(job_id, attempt, done),
            "p_item_next": item_id,
            "p_fp_next": reuse_fingerprint,
        }
        finished: Any
        started: Any
        billed: Bill | None = None
        if self._dialect == "postgresql":
            if bill is None:
                (statement,) = _item_statements(self._dialect)["done_then_start"]
            else:
                rider = None if bill.carrying is None else bill.carrying.statement
                statement = _billed_done_then_start(rider)
                params.update(bill.statement_params())
            row = self.session.execute(statement, params).one()
            finished, started = (row if row.id is not None else None), row
            if bill is not None and started.text is not None and started.reusable_id is None:
                fit = row.billed is not None
                billed = Bill(fit, fit and bool(getattr(row, "carried", False)))
        else:
            fence, finish, start = _item_statements(self._dialect)["done_then_start"]
            if self.session.execute(fence, params).first() is None:
                return FinishedItem(won=False), None, None
            finished = self.session.execute(finish, params).first()
            started = self.session.execute(start, params).first()
            if bill is not None and started is not None and started.reusable_id is None:
                billed = bill.run(self.session)
        return _finished(finished), _started(started if started and started.text else None), billed

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
        if error_message is not None:
            params = {"p_job": job_id, "p_attempt": attempt, "p_item": item_id}
            return _finished(self._fenced_move("error", {**params, "p_message": error_message}))
        done = DoneItem(
            item_id, audio_path, audio_bytes, audio_sha256, fingerprint, replaced_audio_path
        )
        return self.finish_done(job_id, attempt, done)

    def finish_done(self, job_id: int, attempt: int, done: DoneItem) -> FinishedItem:
        """Fenced: ``finish_item`` to DONE, for a finish already described by ``done``."""
        return _finished(self._fenced_move("done", _done_params(job_id, attempt, done)))

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
    ``done_then_start`` is two moves under one fence: an item's DONE and the next item's
    start, whose counters the job's one UPDATE moves together.
    """
    job_id = bindparam("p_job", type_=Id)
    this, following = _ItemMoves(""), _ItemMoves("_next")

    def fence(*deltas: dict[str, ColumnElement[int]]) -> Any:
        return (
            update(jobs)
            .where(
                jobs.c.id == job_id,
                jobs.c.status == const(JobStatus.GENERATING),
                jobs.c.attempt == bindparam("p_attempt", type_=Integer),
            )
            .values(
                updated_at=db_now(), version=jobs.c.version + const(1), **counters_after(*deltas)
            )
            .returning(jobs.c.id)
        )

    def fenced(*moves: tuple[dict[str, ColumnElement[int]], Any]) -> tuple[Any, ...]:
        job = fence(*(deltas for deltas, _ in moves))
        if dialect != "postgresql":
            return job, *(move for _, move in moves)
        # A move happens only if the fence won. An uncorrelated EXISTS is the move's
        # one-time filter, evaluated before the item is scanned (EXPLAIN: "Result,
        # One-Time Filter: $n" over the items scan, $n the CTE scan of the fence): the
        # job's row is locked first, the lock order of every other writer of items.
        won = select(job.cte("fence").c.id).exists()
        if len(moves) == 1:
            return (moves[0][1].where(won),)
        # Two moves: each a CTE of its own, answered in one row whether or not they moved.
        done, started = (
            move.where(won).cte(name)
            for name, (_, move) in zip(("done", "started"), moves, strict=True)
        )
        return (
            select(
                select(done.c.id).scalar_subquery().label("id"),
                select(done.c.still_referenced).scalar_subquery().label("still_referenced"),
                *(select(column).scalar_subquery().label(column.key) for column in started.c),
            ),
            started,
        )

    done_then_start = fenced(this.done(), following.start())
    started: Any = None
    if dialect == "postgresql":
        # Its started CTE too, on which the billed variant's bill depends.
        (*moves, started) = done_then_start
        done_then_start = tuple(moves)
    return {
        "stamp": (fence(),),
        "start": fenced(this.start()),
        "reuse": fenced(this.reuse()),
        "return": fenced(this.back_to_pending()),
        "done": fenced(this.done()),
        "error": fenced(this.error()),
        "done_then_start": done_then_start,
        "started_cte": (started,),
    }


# PostgreSQL's done_then_start carrying the started item's bill, per rider statement (None:
# no rider; else the slot's renewal), built once.
_BILLED: dict[int | None, tuple[TextualSelect | None, Any]] = {}


def _billed_done_then_start(rider: TextualSelect | None) -> Any:
    """PostgreSQL: ``done_then_start`` that also bills the started item's call (the run's
    line and the month's reservation, ``spending.bill_ctes``) when it started an item to
    send (no reusable audio found), and carries ``rider``; one statement, one round trip,
    while the job's row is locked. It answers, besides the moves, ``billed`` (the month's
    row, when the call fit) and ``carried`` (whether the rider won)."""
    key = None if rider is None else id(rider)
    cached = _BILLED.get(key)
    if cached is not None and cached[0] is rider:
        return cached[1]
    statements = _item_statements("postgresql")
    (moves,), (started,) = statements["done_then_start"], statements["started_cte"]
    to_send = select(started.c.text).where(started.c.reusable_id.is_(None)).exists()
    line, reserve = bill_ctes("postgresql", to_send)
    reserved = reserve.cte("reserve")
    extra = [select(reserved.c.id).scalar_subquery().label("billed")]
    ctes = [line.returning(runs.c.id).cte("run_line")]
    if rider is not None:
        carried = rider.cte("carried")
        ctes.append(carried)
        extra.append(select(const(1)).select_from(carried).exists().label("carried"))
    statement = moves.add_columns(*extra).add_cte(*ctes)
    _BILLED[key] = (rider, statement)
    return statement


class _ItemMoves:
    """The moves of one item (``p_item``, ``p_fp``… with ``suffix``): per move, the
    counters' deltas and the item's UPDATE, under the same condition on its status."""

    def __init__(self, suffix: str) -> None:
        self.param = lambda name, type_: bindparam(f"{name}{suffix}", type_=type_)
        item_id = self.item_id = self.param("p_item", Id)
        self.this_item = (items.c.id == item_id, items.c.job_id == bindparam("p_job", type_=Id))
        self.old_status = select(items.c.status).where(*self.this_item).scalar_subquery()
        self.fingerprint = self.param("p_fp", String)

    def start(self) -> tuple[dict[str, ColumnElement[int]], Any]:
        # The newest finished audio of a fingerprint: one probe of
        # ix_items_fingerprint_updated_at.
        reusable = (
            select(_SRC.c.id)
            .where(
                _SRC.c.fingerprint == self.fingerprint,
                _SRC.c.status == const(ItemStatus.DONE),
                _SRC.c.audio_path.is_not(None),
            )
            .order_by(_SRC.c.updated_at.desc())
            .limit(const(1))
            .scalar_subquery()
        )
        return (
            counter_deltas(self.old_status, STARTABLE, ItemStatus.GENERATING),
            update(items)
            .where(*self.this_item, one_of(items.c.status, STARTABLE))
            .values(status=const(ItemStatus.GENERATING), error_message=null(), updated_at=db_now())
            .returning(items.c.text, items.c.audio_path, reusable.label("reusable_id")),
        )

    def reuse(self) -> tuple[dict[str, ColumnElement[int]], Any]:
        source_id = self.param("p_src", Id)
        source_done = (
            select(_SRC.c.id)
            .where(
                _SRC.c.id == source_id,
                _SRC.c.status == const(ItemStatus.DONE),
                _SRC.c.audio_path.is_not(None),
            )
            .exists()
        )

        def of_source(column: Any) -> Any:
            return select(column).where(_SRC.c.id == source_id).scalar_subquery()

        reusable_from = (*STARTABLE, ItemStatus.GENERATING)
        # The counters move for a reuse only when the item will: same conditions as its UPDATE.
        reuse_status = case((source_done, self.old_status), else_=const("-"))
        return (
            counter_deltas(reuse_status, reusable_from, ItemStatus.DONE),
            update(items)
            .where(*self.this_item, one_of(items.c.status, reusable_from), source_done)
            .values(
                status=const(ItemStatus.DONE),
                error_message=null(),
                reused=true(),
                fingerprint=self.fingerprint,
                audio_path=of_source(_SRC.c.audio_path),
                audio_bytes=of_source(_SRC.c.audio_bytes),
                audio_sha256=of_source(_SRC.c.audio_sha256),
                updated_at=db_now(),
            )
            .returning(items.c.id),
        )

    def back_to_pending(self) -> tuple[dict[str, ColumnElement[int]], Any]:
        return (
            counter_deltas(self.old_status, _GENERATING, ItemStatus.PENDING),
            update(items)
            .where(*self.this_item, items.c.status == const(ItemStatus.GENERATING))
            .values(status=const(ItemStatus.PENDING), updated_at=db_now())
            .returning(items.c.id),
        )

    def done(self) -> tuple[dict[str, ColumnElement[int]], Any]:
        path, sha = self.param("p_path", String), self.param("p_sha", String)
        return (
            counter_deltas(self.old_status, _GENERATING, ItemStatus.DONE),
            update(items)
            .where(
                *self.this_item,
                or_(
                    items.c.status == const(ItemStatus.GENERATING),
                    # The same write again (a retry after a lost commit ack) wins again;
                    # the counters did not move for it.
                    and_(
                        items.c.status == const(ItemStatus.DONE),
                        items.c.audio_path == path,
                        items.c.audio_sha256 == sha,
                    ),
                ),
            )
            .values(
                status=const(ItemStatus.DONE),
                error_message=null(),
                audio_path=path,
                audio_bytes=self.param("p_bytes", Integer),
                audio_sha256=sha,
                fingerprint=self.fingerprint,
                reused=false(),
                updated_at=db_now(),
            )
            .returning(
                items.c.id,
                # Whether the audio this one replaces is still shared by another item.
                select(_SRC.c.id)
                .where(_SRC.c.audio_path == self.param("p_old", String), _SRC.c.id != self.item_id)
                .exists()
                .label("still_referenced"),
            ),
        )

    def error(self) -> tuple[dict[str, ColumnElement[int]], Any]:
        return (
            counter_deltas(self.old_status, _GENERATING, ItemStatus.ERROR),
            update(items)
            .where(*self.this_item, items.c.status == const(ItemStatus.GENERATING))
            .values(
                status=const(ItemStatus.ERROR),
                error_message=self.param("p_message", Text),
                updated_at=db_now(),
            )
            .returning(items.c.id, false().label("still_referenced")),
        )


_SRC = items.alias("src")
_GENERATING = (ItemStatus.GENERATING,)
