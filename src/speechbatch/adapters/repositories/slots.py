"""Provider slots and pace shared by the whole deployment: the repository side.

A slot is a row of ``provider_slots`` whose number is 0 .. PROVIDER_CONCURRENCY - 1: the
primary key makes two live holders of one number impossible, so at most that many calls
are in flight across every process sharing the database. Taking a slot is ONE statement
(INSERT … ON CONFLICT DO UPDATE … WHERE, the reclaim-or-insert of the organization locks):
it grants a number nobody holds, re-grants a released one, or reclaims one whose holder
(a worker identity) stopped heartbeating for WORKER_DEAD_SECONDS. No sweeper is needed.
On PostgreSQL the conflict's WHERE is re-checked on the newest version of the slot's row
(so two acquirers of one number cannot both win); on SQLite the writer's BEGIN IMMEDIATE
serializes it. Every grant increments ``token``; a release names its token, so a stale
release (after a reclaim) changes nothing.

The pace is one row (``provider_pace``): ``next_start_at`` is advanced by a conditional
UPDATE on the database's clock, so calls start evenly across the deployment, and a 429's
Retry-After pushes it forward for everyone.

This only builds queries: nothing here commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

from sqlalchemy import (
    ColumnElement,
    Float,
    Table,
    and_,
    func,
    literal,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now, later
from speechbatch.adapters.models import JobStatus, ProviderPace, ProviderSlot, RunOutcome
from speechbatch.adapters.repositories.channels import SLOT_CHANNEL
from speechbatch.adapters.repositories.slot_statements import Limits, acquire_statement
from speechbatch.adapters.repositories.sql_functions import greatest, plus_seconds
from speechbatch.adapters.repositories.tables import jobs, runs

provider_slots = cast(Table, ProviderSlot.__table__)
provider_pace = cast(Table, ProviderPace.__table__)
# The default provider's pace row (another provider of several has its own).
PACE_ROW = 1


@dataclass(frozen=True)
class SlotGrant:
    """A slot held: its number and the token that fences its release."""

    slot: int
    token: int


@dataclass(frozen=True)
class PaceAnswer:
    """When the next call may start: ``wait_seconds`` from now (0: at once), or None when
    the pace is booked or paused beyond the horizon (ask again later)."""

    wait_seconds: float | None
    paused_for_seconds: float = 0.0


class SlotReads(Protocol):
    """What a reader may ask of the slots: how many are held, how long starts pause."""

    def slots_in_flight(self, *, worker_dead_seconds: float, max_hold_seconds: float) -> int: ...
    def paused_for(self) -> float: ...


class SlotRepository:
    """Take and release deployment-wide provider slots; keep the pace (one session)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._dialect = session.get_bind().dialect.name

    def acquire_slot(
        self,
        worker_id: int,
        job_id: int,
        attempt: int,
        *,
        capacity: int,
        worker_dead_seconds: float,
        max_hold_seconds: float,
        first: int = 0,
        sharing: tuple[str, tuple[str, ...]] = ("", ()),
    ) -> SlotGrant | None:
        """Compare-and-set: take a free (or dead holder's) slot for this run; None if none.

        Refused too when the run is no longer GENERATING at ``attempt`` (fenced), and
        when the job already holds its fair share: ceil(capacity / GENERATING jobs).
        A slot held longer than ``max_hold_seconds`` (longer than any call lasts: its
        release was lost) counts as free, like one whose worker is dead.
        """
        statement = acquire_statement(
            self._dialect,
            Limits(capacity, worker_dead_seconds, max_hold_seconds, first, *sharing),
        )
        row = self.session.execute(
            statement, {"worker_id": worker_id, "job_id": job_id, "attempt": attempt}
        ).first()
        if row is None:
            return None
        return SlotGrant(int(row.slot), int(row.token))

    def renew_slot(self, grant: SlotGrant) -> bool:
        """Compare-and-set: restart the hold of a slot still held under this grant's token
        (its ``acquired_at`` becomes now); whether it won. It loses when the slot was
        given to someone else meanwhile (a reclaim bumps the token), so a holder that
        waited long never sends on a slot another holder may be using."""
        row = self.session.execute(
            update(provider_slots)
            .where(*_held_under(grant))
            .values(acquired_at=db_now())
            .returning(provider_slots.c.slot)
        ).first()
        return row is not None

    def release_slot(self, grant: SlotGrant, job_id: int | None = None) -> bool:
        """Compare-and-set: release a slot still held under this grant's token; whether it won."""
        return self.release_slots([grant], job_id) == 1

    def release_slots(self, grants: list[SlotGrant], job_id: int | None = None) -> int:
        """Compare-and-set, for each grant: release its slot if still held under its
        token; how many of them won. On PostgreSQL the release also notifies
        ``SLOT_CHANNEL`` (with the job's id, if given) when it commits: waiters of every
        process wake at once."""
        won = 0
        returning: list[Any] = [provider_slots.c.slot]
        if self._dialect == "postgresql":
            # Sent when the transaction commits: waiters of every process wake at once.
            payload = "" if job_id is None else str(job_id)
            returning.append(func.pg_notify(SLOT_CHANNEL, payload))
        # In slot order: two transactions releasing the same rows lock them in one order.
        for grant in sorted(grants, key=_by_slot):
            row = self.session.execute(
                update(provider_slots)
                .where(*_held_under(grant))
                .values(released_at=db_now())
                .returning(*returning)
            ).first()
            won += row is not None
        return won

    def holds_its_share(
        self,
        job_id: int,
        *,
        capacity: int,
        worker_dead_seconds: float,
        max_hold_seconds: float,
        first: int = 0,
        sharing: tuple[str, tuple[str, ...]] = ("", ()),
    ) -> bool:
        """Whether the job holds its fair share of live slots, ceil(capacity / GENERATING
        jobs): an acquire for it is refused until one of its slots is released (or
        another job stops running)."""
        limits = Limits(capacity, worker_dead_seconds, max_hold_seconds, first, *sharing)
        return bool(
            self.session.execute(select(limits.held_by(job_id) >= limits.share())).scalar_one()
        )

    def slots_in_flight(self, *, worker_dead_seconds: float, max_hold_seconds: float) -> int:
        """How many slots live holders have now."""
        limits = Limits(0, worker_dead_seconds, max_hold_seconds)
        held = provider_slots.alias("held")
        return int(
            self.session.execute(
                select(func.count()).select_from(held).where(limits.live(held))
            ).scalar_one()
        )

    def reserve_start(self, interval_seconds: float, pace_row: int = PACE_ROW) -> PaceAnswer:
        """Compare-and-set: book the next start, ``interval_seconds`` after the previous one.

        Books only a start at most one interval (or a quarter second) ahead of the
        database's clock, so a waiting thread holds no far-off start it might never use;
        further ahead (the pace is booked, or a 429 paused it) answers
        ``wait_seconds=None`` and the caller asks again. ``pace_row``: the pace's row (each
        provider of several has its own).
        """
        interval = literal(float(interval_seconds), Float)
        next_start = provider_pace.c.next_start_at
        # RETURNING sees the new row: the start booked is the new next_start_at minus one.
        row = self.session.execute(
            update(provider_pace)
            .where(
                provider_pace.c.id == pace_row,
                next_start <= later(max(float(interval_seconds), 0.25)),
            )
            .values(next_start_at=plus_seconds(greatest(next_start, db_now()), interval))
            .returning(
                plus_seconds(next_start, -interval).label("starts_at"),
                db_now().label("now"),
            )
        ).first()
        if row is None:
            until = self._paused_until(pace_row)
            if until is None:
                self._ensure_pace_row(pace_row)
                return PaceAnswer(None)
            return PaceAnswer(None, max(0.0, until))
        return PaceAnswer(max(0.0, _seconds(row.starts_at, row.now)))

    def _paused_until(self, pace_row: int) -> float | None:
        row = self.session.execute(
            select(provider_pace.c.next_start_at, db_now().label("now")).where(
                provider_pace.c.id == pace_row
            )
        ).first()
        return None if row is None else _seconds(row.next_start_at, row.now)

    def _ensure_pace_row(self, row: int) -> None:
        insert_fn = postgresql.insert if self._dialect == "postgresql" else sqlite.insert
        self.session.execute(
            insert_fn(provider_pace)
            .values(id=row, next_start_at=db_now())
            .on_conflict_do_nothing(index_elements=[provider_pace.c.id])
        )

    def paused_for(self, row: int = PACE_ROW) -> float:
        """Seconds until calls may start again (a 429 paused them); 0 when not paused."""
        until = self._paused_until(row)
        return 0.0 if until is None else max(0.0, until)

    def pause_starts(self, seconds: float, row: int = PACE_ROW) -> None:
        """Push the deployment's next start at least ``seconds`` from now (a 429's Retry-After)."""
        statement = (
            update(provider_pace)
            .where(provider_pace.c.id == row)
            .values(next_start_at=greatest(provider_pace.c.next_start_at, later(seconds)))
            .returning(provider_pace.c.next_start_at)
        )
        if self.session.execute(statement).first() is None:
            self._ensure_pace_row(row)
            self.session.execute(statement)

    def count_waiting(self, job_id: int, attempt: int, reason: str, delta: int) -> None:
        """Add ``delta`` to the run's count of items waiting for ``reason`` (slot or pace)."""
        column = runs.c.waiting_for_slot if reason == "slot" else runs.c.waiting_for_pace
        # The counts show in the job's answer, so its version (the ETag) moves with them;
        # the job row first: the lock order of an item's start (job, then its run).
        self.session.execute(
            update(jobs).where(jobs.c.id == job_id).values(version=jobs.c.version + 1)
        )
        self.session.execute(
            update(runs)
            .where(runs.c.job_id == job_id, runs.c.attempt == attempt)
            .values({column: column + delta})
        )

    def waiting(self, job_id: int) -> tuple[int, int]:
        """(waiting for a slot, waiting for the pace) of the job's live run; zeros otherwise."""
        row = self.session.execute(
            select(runs.c.waiting_for_slot, runs.c.waiting_for_pace)
            .join(jobs, and_(jobs.c.id == runs.c.job_id, jobs.c.attempt == runs.c.attempt))
            .where(
                jobs.c.id == job_id,
                jobs.c.status == JobStatus.GENERATING,
                runs.c.outcome == RunOutcome.RUNNING,
            )
        ).first()
        if row is None:
            return 0, 0
        return max(0, int(row.waiting_for_slot)), max(0, int(row.waiting_for_pace))


def _held_under(grant: SlotGrant) -> tuple[ColumnElement[bool], ...]:
    """The slot's row, still held under the grant's token (not reclaimed, not released)."""
    return (
        provider_slots.c.slot == grant.slot,
        provider_slots.c.token == grant.token,
        provider_slots.c.released_at.is_(None),
    )


def _by_slot(grant: SlotGrant) -> int:
    return grant.slot


def _seconds(later_moment: datetime, earlier: datetime) -> float:
    return (later_moment - earlier).total_seconds()
