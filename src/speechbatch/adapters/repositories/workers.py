"""Worker processes: one row per process start, its heartbeat, and the runs it takes.

With ``SPEECHBATCH_RUNNER=worker`` a click claims the job with no worker on its run (the
run's ``worker_id`` is NULL: claimed, waiting for a worker); a worker process then takes
it by compare-and-set (``take_run``), and from there on the run is that worker's, so the
dead-worker rule of recovery applies to it as to any run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import JobStatus, RunOutcome
from speechbatch.adapters.repositories.tables import jobs, runs, workers

# NOTIFY channel of work waiting for the worker tier (PostgreSQL): workers wake at once.
RUN_CHANNEL = "speechbatch_runs"


@dataclass(frozen=True)
class WaitingRun:
    """A run claimed for the worker tier that no worker has taken yet."""

    job_id: int
    attempt: int


class Workers(Protocol):
    """What the worker identity and the worker tier need."""

    def register_worker(self, hostname: str, pid: int) -> int: ...
    def heartbeat_worker(self, worker_id: int) -> None: ...
    def beat_runs(self, worker_id: int, running: list[tuple[int, int]]) -> None: ...
    def mark_worker_stopped(self, worker_id: int) -> None: ...
    def waiting_runs(self, limit: int) -> list[WaitingRun]: ...
    def take_run(self, job_id: int, attempt: int, worker_id: int) -> bool: ...
    def wake_workers(self) -> None: ...


class WorkersRepository:
    """Worker rows, and the runs workers take, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def register_worker(self, hostname: str, pid: int) -> int:
        """Register a new process start; every start is a new identity."""
        return int(
            self.session.execute(
                insert(workers).values(hostname=hostname, pid=pid).returning(workers.c.id)
            ).scalar_one()
        )

    def heartbeat_worker(self, worker_id: int) -> None:
        """Stamp a worker's heartbeat with the database's clock."""
        self.session.execute(
            update(workers).where(workers.c.id == worker_id).values(heartbeat_at=db_now())
        )

    def beat_runs(self, worker_id: int, running: list[tuple[int, int]]) -> None:
        """Stamp the beat of the runs (job, attempt) this worker is running now, with the
        database's clock: a run it no longer runs stops being stamped, and is dead once
        its beat is older than WORKER_DEAD_SECONDS."""
        if not running:
            return
        self.session.execute(
            update(runs)
            .where(
                runs.c.worker_id == worker_id,
                runs.c.outcome == RunOutcome.RUNNING,
                or_(*(and_(runs.c.job_id == j, runs.c.attempt == a) for j, a in running)),
            )
            .values(heartbeat_at=db_now())
        )

    def mark_worker_stopped(self, worker_id: int) -> None:
        """Record that a worker stopped on purpose."""
        self.session.execute(
            update(workers).where(workers.c.id == worker_id).values(stopped_at=db_now())
        )

    def waiting_runs(self, limit: int) -> list[WaitingRun]:
        """Live runs that no worker has taken yet, oldest claim first (read only)."""
        rows = self.session.execute(
            select(runs.c.job_id, runs.c.attempt)
            .join(jobs, and_(jobs.c.id == runs.c.job_id, jobs.c.attempt == runs.c.attempt))
            .where(
                runs.c.worker_id.is_(None),
                runs.c.outcome == RunOutcome.RUNNING,
                jobs.c.status == JobStatus.GENERATING,
            )
            .order_by(runs.c.id)
            .limit(limit)
        )
        return [WaitingRun(int(r.job_id), int(r.attempt)) for r in rows]

    def take_run(self, job_id: int, attempt: int, worker_id: int) -> bool:
        """Compare-and-set: make a waiting run this worker's, with a fresh beat; whether
        it won.

        The guard is on the run's own row (no worker yet, still RUNNING): of two workers
        exactly one wins. A run recovered meanwhile is fenced at its first write.
        """
        row = self.session.execute(
            update(runs)
            .where(
                runs.c.job_id == job_id,
                runs.c.attempt == attempt,
                runs.c.worker_id.is_(None),
                runs.c.outcome == RunOutcome.RUNNING,
            )
            .values(worker_id=worker_id, heartbeat_at=db_now())
            .returning(runs.c.id)
        ).first()
        return row is not None

    def wake_workers(self) -> None:
        """Wake the workers when this transaction commits (PostgreSQL's NOTIFY; elsewhere
        their poll finds the work): a run or an export waits for one."""
        if self.session.get_bind().dialect.name == "postgresql":
            self.session.execute(select(func.pg_notify(RUN_CHANNEL, "")))
