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
from typing import Protocol

from sqlalchemy import Executable, func, select, text
from sqlalchemy.orm import Session

from ..db import UTCDateTime

# The PostgreSQL channel a slot's release notifies (see ``runner/gate.py``).
SLOT_CHANNEL = "speechbatch_slots"

# Per dialect: the database's real time, and that time shifted by a bound number of seconds.
_NOW = {
    "postgresql": "clock_timestamp()",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f000', 'now')",
}


def _shifted(dialect: str, param: str) -> str:
    if dialect == "postgresql":
        return f"(clock_timestamp() + make_interval(secs => CAST(:{param} AS double precision)))"
    return f"strftime('%Y-%m-%d %H:%M:%f000', 'now', printf('%+.6f seconds', :{param}))"


def _plus(dialect: str, column: str, param: str) -> str:
    """``column`` (a timestamp expression) plus a bound number of seconds."""
    if dialect == "postgresql":
        return f"({column} + make_interval(secs => CAST(:{param} AS double precision)))"
    return f"strftime('%Y-%m-%d %H:%M:%f000', {column}, printf('%+.6f seconds', :{param}))"


def _greatest(dialect: str, a: str, b: str) -> str:
    return f"GREATEST({a}, {b})" if dialect == "postgresql" else f"max({a}, {b})"


def _alive(dialect: str, worker: str) -> str:
    """SQL: the worker ``worker`` (an id expression) heartbeats and has not stopped."""
    return (
        f"EXISTS (SELECT 1 FROM workers w WHERE w.id = {worker} AND w.stopped_at IS NULL "
        f"AND w.heartbeat_at >= {_shifted(dialect, 'neg_dead')})"
    )


def _live(dialect: str, slot: str) -> str:
    """SQL: the slot row ``slot`` (an alias) is held: not released, not held longer than a
    call can last (a release lost to a database outage), and its worker is alive."""
    return (
        f"{slot}.released_at IS NULL AND {slot}.acquired_at >= {_shifted(dialect, 'neg_hold')} "
        f"AND {_alive(dialect, slot + '.worker_id')}"
    )


def _statements(dialect: str) -> dict[str, Executable]:
    now = _NOW[dialect]
    held = f"SELECT s.slot FROM provider_slots s WHERE {_live(dialect, 's')}"
    jobs_running = "(SELECT count(*) FROM jobs j WHERE j.status = 'GENERATING')"
    share = (
        f"(:cap + {_greatest(dialect, '1', jobs_running)} - 1) "
        f"/ {_greatest(dialect, '1', jobs_running)}"
    )
    held_by_job = (
        f"(SELECT count(*) FROM provider_slots s WHERE s.job_id = :job AND {_live(dialect, 's')})"
    )
    # Candidate numbers 0 .. cap-1, free ones only, in random order so that concurrent
    # acquirers rarely pick the same number (a collision costs the loser one retry).
    acquire = f"""
        WITH RECURSIVE numbers(n) AS (
            SELECT 0 UNION ALL SELECT n + 1 FROM numbers WHERE n + 1 < :cap
        )
        INSERT INTO provider_slots (slot, token, worker_id, job_id, attempt, acquired_at)
        SELECT c.n, 1, :worker, :job, :attempt, {now}
        FROM numbers c
        WHERE c.n NOT IN ({held})
          AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = :job AND j.attempt = :attempt
                      AND j.status = 'GENERATING')
          AND {held_by_job} < {share}
        ORDER BY random()
        LIMIT 1
        ON CONFLICT (slot) DO UPDATE SET
            token = provider_slots.token + 1,
            worker_id = excluded.worker_id,
            job_id = excluded.job_id,
            attempt = excluded.attempt,
            acquired_at = excluded.acquired_at,
            released_at = NULL
        WHERE NOT ({_live(dialect, "provider_slots")})
        RETURNING slot, token
    """
    release = (
        f"UPDATE provider_slots SET released_at = {now} "
        "WHERE slot = :slot AND token = :token AND released_at IS NULL RETURNING slot"
    )
    in_flight = f"SELECT count(*) FROM ({held}) h"
    holds_share = f"SELECT {held_by_job} >= {share} AS holds"
    wait_column = (
        "UPDATE runs SET {column} = {column} + :delta WHERE job_id = :job AND attempt = :attempt"
    )
    return {
        "acquire": text(acquire),
        "release": text(release),
        "in_flight": text(in_flight),
        "holds_share": text(holds_share),
        # The counts show in the job's answer, so its version (the ETag) moves with them.
        "bump_job": text("UPDATE jobs SET version = version + 1 WHERE id = :job"),
        "wait_slot": text(wait_column.format(column="waiting_for_slot")),
        "wait_pace": text(wait_column.format(column="waiting_for_pace")),
        "waiting": text(
            "SELECT r.waiting_for_slot, r.waiting_for_pace FROM runs r JOIN jobs j "
            "ON j.id = r.job_id AND j.attempt = r.attempt "
            "WHERE j.id = :job AND j.status = 'GENERATING' AND r.outcome = 'RUNNING'"
        ),
        **_pace_statements(dialect),
    }


def _pace_statements(dialect: str) -> dict[str, Executable]:
    now = _NOW[dialect]
    # Reserve a start time: at most one interval ahead of the database's clock, so that a
    # waiting thread holds no far-off reservation it might never use. RETURNING sees the
    # new row: the start booked is the new next_start_at minus one interval.
    reserve = f"""
        UPDATE provider_pace
        SET next_start_at = {_plus(dialect, _greatest(dialect, "next_start_at", now), "interval")}
        WHERE id = 1 AND next_start_at <= {_shifted(dialect, "horizon")}
        RETURNING {_plus(dialect, "next_start_at", "neg_interval")} AS starts_at, {now} AS now
    """
    pause = f"""
        UPDATE provider_pace
        SET next_start_at = {_greatest(dialect, "next_start_at", _shifted(dialect, "seconds"))}
        WHERE id = 1
        RETURNING next_start_at
    """
    paused_until = f"SELECT next_start_at, {now} AS now FROM provider_pace WHERE id = 1"
    ensure_pace = (
        f"INSERT INTO provider_pace (id, next_start_at) VALUES (1, {now}) "
        "ON CONFLICT (id) DO NOTHING"
    )
    times = {"starts_at": UTCDateTime(), "now": UTCDateTime(), "next_start_at": UTCDateTime()}
    return {
        "reserve": text(reserve).columns(starts_at=times["starts_at"], now=times["now"]),
        "pause": text(pause).columns(next_start_at=times["next_start_at"]),
        "paused_until": text(paused_until).columns(
            next_start_at=times["next_start_at"], now=times["now"]
        ),
        "ensure_pace": text(ensure_pace),
    }


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
        self._sql = _statements(session.get_bind().dialect.name)

    def acquire_slot(
        self,
        worker_id: int,
        job_id: int,
        attempt: int,
        *,
        capacity: int,
        worker_dead_seconds: float,
        max_hold_seconds: float,
    ) -> SlotGrant | None:
        """Compare-and-set: take a free (or dead holder's) slot for this run; None if none.

        Refused too when the run is no longer GENERATING at ``attempt`` (fenced), and
        when the job already holds its fair share: ceil(capacity / GENERATING jobs).
        A slot held longer than ``max_hold_seconds`` (longer than any call lasts: its
        release was lost) counts as free, like one whose worker is dead.
        """
        row = self.session.execute(
            self._sql["acquire"],
            {
                **_share_params(job_id, capacity, worker_dead_seconds, max_hold_seconds),
                "worker": worker_id,
                "attempt": attempt,
            },
        ).first()
        if row is None:
            return None
        return SlotGrant(int(row.slot), int(row.token))

    def release_slot(self, grant: SlotGrant, job_id: int | None = None) -> bool:
        """Compare-and-set: release a slot still held under this grant's token; whether it won."""
        return self.release_slots([grant], job_id) == 1

    def release_slots(self, grants: list[SlotGrant], job_id: int | None = None) -> int:
        """Compare-and-set, for each grant: release its slot if still held under its
        token; how many of them won. On PostgreSQL the release also notifies
        ``SLOT_CHANNEL`` (with the job's id, if given) when it commits: waiters of every
        process wake at once."""
        won = 0
        # In slot order: two transactions releasing the same rows lock them in one order.
        for grant in sorted(grants, key=_by_slot):
            params = {"slot": grant.slot, "token": grant.token}
            won += self.session.execute(self._sql["release"], params).first() is not None
        if won and self.session.get_bind().dialect.name == "postgresql":
            payload = "" if job_id is None else str(job_id)
            self.session.execute(select(func.pg_notify(SLOT_CHANNEL, payload)))
        return won

    def holds_its_share(
        self, job_id: int, *, capacity: int, worker_dead_seconds: float, max_hold_seconds: float
    ) -> bool:
        """Whether the job holds its fair share of live slots, ceil(capacity / GENERATING
        jobs): an acquire for it is refused until one of its slots is released (or
        another job stops running)."""
        params = _share_params(job_id, capacity, worker_dead_seconds, max_hold_seconds)
        return bool(self.session.execute(self._sql["holds_share"], params).scalar_one())

    def slots_in_flight(self, *, worker_dead_seconds: float, max_hold_seconds: float) -> int:
        """How many slots live holders have now."""
        params = {"neg_dead": -float(worker_dead_seconds), "neg_hold": -float(max_hold_seconds)}
        return int(self.session.execute(self._sql["in_flight"], params).scalar_one())

    def _ensure_pace_row(self) -> None:
        self.session.execute(self._sql["ensure_pace"])

    def reserve_start(self, interval_seconds: float) -> PaceAnswer:
        """Compare-and-set: book the next start, ``interval_seconds`` after the previous one.

        Books only a start at most one interval (or a quarter second) ahead of the
        database's clock; further ahead (the pace is booked, or a 429 paused it) answers
        ``wait_seconds=None`` and the caller asks again.
        """
        params = {
            "interval": float(interval_seconds),
            "neg_interval": -float(interval_seconds),
            "horizon": max(float(interval_seconds), 0.25),
        }
        row = self.session.execute(self._sql["reserve"], params).first()
        if row is None:
            until = self.session.execute(self._sql["paused_until"]).first()
            if until is None:
                self._ensure_pace_row()
                return PaceAnswer(None)
            return PaceAnswer(None, _seconds(until.next_start_at, until.now))
        return PaceAnswer(max(0.0, _seconds(row.starts_at, row.now)))

    def paused_for(self) -> float:
        """Seconds until calls may start again (a 429 paused them); 0 when not paused."""
        row = self.session.execute(self._sql["paused_until"]).first()
        if row is None:
            return 0.0
        return max(0.0, _seconds(row.next_start_at, row.now))

    def pause_starts(self, seconds: float) -> None:
        """Push the deployment's next start at least ``seconds`` from now (a 429's Retry-After)."""
        row = self.session.execute(self._sql["pause"], {"seconds": float(seconds)}).first()
        if row is None:
            self._ensure_pace_row()
            self.session.execute(self._sql["pause"], {"seconds": float(seconds)})

    def count_waiting(self, job_id: int, attempt: int, reason: str, delta: int) -> None:
        """Add ``delta`` to the run's count of items waiting for ``reason`` (slot or pace)."""
        statement = self._sql["wait_slot" if reason == "slot" else "wait_pace"]
        # The job row first: the lock order of an item's start (job, then its run).
        self.session.execute(self._sql["bump_job"], {"job": job_id})
        self.session.execute(statement, {"job": job_id, "attempt": attempt, "delta": delta})

    def waiting(self, job_id: int) -> tuple[int, int]:
        """(waiting for a slot, waiting for the pace) of the job's live run; zeros otherwise."""
        row = self.session.execute(self._sql["waiting"], {"job": job_id}).first()
        if row is None:
            return 0, 0
        return max(0, int(row.waiting_for_slot)), max(0, int(row.waiting_for_pace))


def _share_params(
    job_id: int, capacity: int, worker_dead_seconds: float, max_hold_seconds: float
) -> dict[str, int | float]:
    """The parameters of a job's fair share and of what counts as a live slot."""
    return {
        "job": job_id,
        "cap": int(capacity),
        "neg_dead": -float(worker_dead_seconds),
        "neg_hold": -float(max_hold_seconds),
    }


def _by_slot(grant: SlotGrant) -> int:
    return grant.slot


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()
