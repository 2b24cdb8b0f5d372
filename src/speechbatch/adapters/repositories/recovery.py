"""Lease-expiry recovery: finding dead runs and ending them by compare-and-set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import ColumnElement, and_, case, exists, literal, or_, select, update
from sqlalchemy.orm import Session

from speechbatch.adapters.db import ago
from speechbatch.adapters.models import ItemStatus, JobStatus, RunOutcome
from speechbatch.adapters.repositories.jobs import fail_in_flight_counters
from speechbatch.adapters.repositories.runs import RunsRepository
from speechbatch.adapters.repositories.tables import items, jobs, runs, workers


@dataclass(frozen=True)
class StaleJob:
    """A GENERATING job that looked dead when read, and why."""

    job_id: int
    attempt: int
    # "lease", "worker" (no live process beats for the run) or "unassigned" (no worker
    # took the claimed run)
    reason: str
    worker: str | None


def stale_progress(lease_seconds: float | ColumnElement[float]) -> ColumnElement[bool]:
    """The job's newest progress signal (its own or an item's) is older than the lease."""
    cutoff = ago(lease_seconds)
    return and_(
        jobs.c.updated_at < cutoff,
        ~exists().where(items.c.job_id == jobs.c.id, items.c.updated_at >= cutoff).correlate(jobs),
    )


def dead_run(worker_dead_seconds: float | ColumnElement[float]) -> ColumnElement[bool]:
    """No live process runs the job's current run: its own beat (stamped by its claim and
    by the heartbeat of the process running it) is older than ``worker_dead_seconds``, or
    its process stopped. A process that died and one that gave the run up look the same."""
    return (
        select(1)
        .select_from(runs.join(workers, workers.c.id == runs.c.worker_id))
        .where(
            runs.c.job_id == jobs.c.id,
            runs.c.attempt == jobs.c.attempt,
            or_(
                runs.c.heartbeat_at < ago(worker_dead_seconds),
                workers.c.stopped_at.is_not(None),
            ),
        )
        .correlate(jobs)
        .exists()
    )


def unassigned_run(worker_dead_seconds: float | ColumnElement[float]) -> ColumnElement[bool]:
    """The job's current run was claimed for the worker tier and no worker took it within
    ``worker_dead_seconds`` (its run has no worker since then)."""
    return (
        select(1)
        .where(
            runs.c.job_id == jobs.c.id,
            runs.c.attempt == jobs.c.attempt,
            runs.c.worker_id.is_(None),
            runs.c.started_at < ago(worker_dead_seconds),
        )
        .correlate(jobs)
        .exists()
    )


def looks_dead(
    lease_seconds: float | ColumnElement[float], worker_dead_seconds: float | ColumnElement[float]
) -> ColumnElement[bool]:
    """Any of the reasons a GENERATING job is dead: no progress for the lease, no live
    process beats for its run, or no worker took its run."""
    return or_(
        stale_progress(lease_seconds),
        dead_run(worker_dead_seconds),
        unassigned_run(worker_dead_seconds),
    )


def has_orphan_items() -> ColumnElement[bool]:
    """Items left GENERATING although the job is not (one probe of a partial index)."""
    return and_(
        jobs.c.status != JobStatus.GENERATING,
        exists()
        .where(items.c.job_id == jobs.c.id, items.c.status == ItemStatus.GENERATING)
        .correlate(jobs),
    )


class Recovery(Protocol):
    """What the recovery service needs."""

    def find_stale_jobs(
        self,
        *,
        lease_seconds: float,
        worker_dead_seconds: float,
        organization_id: int | None = None,
        job_id: int | None = None,
    ) -> list[StaleJob]: ...

    def recover_stale_job(
        self, stale: StaleJob, *, lease_seconds: float, worker_dead_seconds: float, message: str
    ) -> bool: ...

    def find_orphan_item_jobs(
        self, *, organization_id: int | None = None, job_id: int | None = None
    ) -> list[int]: ...

    def anything_to_recover(
        self, organization_id: int, *, lease_seconds: float, worker_dead_seconds: float
    ) -> bool: ...

    def recover_orphan_items(self, job_id: int, message: str) -> bool: ...


class RecoveryRepository:
    """Finding dead runs (reads) and ending them (compare-and-sets), over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._runs = RunsRepository(session)

    def find_stale_jobs(
        self,
        *,
        lease_seconds: float,
        worker_dead_seconds: float,
        organization_id: int | None = None,
        job_id: int | None = None,
    ) -> list[StaleJob]:
        """GENERATING jobs that look dead now (read only; recovery re-checks)."""
        stale = stale_progress(lease_seconds)
        unassigned = unassigned_run(worker_dead_seconds)
        reason = case(
            (stale, literal("lease")), (unassigned, literal("unassigned")), else_=literal("worker")
        )
        stmt = (
            select(
                jobs.c.id,
                jobs.c.attempt,
                reason.label("reason"),
                workers.c.hostname,
                workers.c.pid,
            )
            .select_from(
                jobs.outerjoin(
                    runs, and_(runs.c.job_id == jobs.c.id, runs.c.attempt == jobs.c.attempt)
                ).outerjoin(workers, workers.c.id == runs.c.worker_id)
            )
            .where(
                jobs.c.status == JobStatus.GENERATING,
                looks_dead(lease_seconds, worker_dead_seconds),
            )
        )
        if organization_id is not None:
            stmt = stmt.where(jobs.c.organization_id == organization_id)
        if job_id is not None:
            stmt = stmt.where(jobs.c.id == job_id)
        return [
            StaleJob(
                job_id=r.id,
                attempt=r.attempt,
                reason=r.reason,
                worker=f"{r.hostname}:{r.pid}" if r.hostname else None,
            )
            for r in self.session.execute(stmt)
        ]

    def recover_stale_job(
        self, stale: StaleJob, *, lease_seconds: float, worker_dead_seconds: float, message: str
    ) -> bool:
        """Compare-and-set: end a dead run; False when somebody got there first.

        Only a job still GENERATING at the attempt that was read, and still stale on
        its own row, is flipped; a stamp or a finish in between makes this a no-op.
        """
        if stale.reason == "lease":
            still_dead = stale_progress(lease_seconds)
        elif stale.reason == "unassigned":
            still_dead = unassigned_run(worker_dead_seconds)
        else:
            still_dead = dead_run(worker_dead_seconds)
        ended = self._runs.end_job(
            stale.job_id, stale.attempt, message, still_dead, fail_in_flight=True
        )
        if ended is None:
            return False
        self._runs.fail_in_flight_items(stale.job_id, message)
        self._runs.end_run(stale.job_id, stale.attempt, RunOutcome.RECOVERED, message)
        return True

    def find_orphan_item_jobs(
        self, *, organization_id: int | None = None, job_id: int | None = None
    ) -> list[int]:
        """Jobs that are not GENERATING yet have items left GENERATING."""
        stmt = (
            select(items.c.job_id)
            .join(jobs, jobs.c.id == items.c.job_id)
            .where(items.c.status == ItemStatus.GENERATING, jobs.c.status != JobStatus.GENERATING)
            .distinct()
        )
        if organization_id is not None:
            stmt = stmt.where(jobs.c.organization_id == organization_id)
        if job_id is not None:
            stmt = stmt.where(jobs.c.id == job_id)
        return list(self.session.execute(stmt).scalars())

    def anything_to_recover(
        self, organization_id: int, *, lease_seconds: float, worker_dead_seconds: float
    ) -> bool:
        """Whether the organization has a dead-looking job or orphan items (one statement:
        the live jobs through ``ix_jobs_status``, orphans through ``ix_items_generating``)."""
        dead = (
            exists()
            .where(
                jobs.c.organization_id == organization_id,
                jobs.c.status == JobStatus.GENERATING,
                looks_dead(lease_seconds, worker_dead_seconds),
            )
            .correlate(None)
        )
        orphan = (
            exists()
            .where(
                items.c.status == ItemStatus.GENERATING,
                jobs.c.id == items.c.job_id,
                jobs.c.organization_id == organization_id,
                jobs.c.status != JobStatus.GENERATING,
            )
            .correlate(None)
        )
        return bool(self.session.execute(select(or_(dead, orphan))).scalar_one())

    def recover_orphan_items(self, job_id: int, message: str) -> bool:
        """Fail items left GENERATING after their job ended; False if the job is live again.

        The job's row is updated first (its counters, under its row lock) so that a claim
        cannot slip in between the check and the write.
        """
        ended = self.session.execute(
            update(jobs)
            .where(jobs.c.id == job_id, jobs.c.status != JobStatus.GENERATING)
            .values(version=jobs.c.version + 1, **fail_in_flight_counters())
            .returning(jobs.c.id)
        ).first()
        if ended is None:
            return False
        self._runs.fail_in_flight_items(job_id, message)
        return True
