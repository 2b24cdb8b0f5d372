"""Which interrupted jobs the system may resume on its own: the repository side.

A job qualifies when its LAST run ended INTERRUPTED (a graceful stop, e.g. SIGTERM at a
deploy), it still has items that are not DONE, and fewer than ``max_streak`` runs of kind
``resume`` came in a row since its last run started by a person without a DONE item
appearing after they started. CANCELLED, RECOVERED, OVER_BUDGET and FAILED last runs never
qualify. The claim itself is the ordinary compare-and-set (``Repository.claim_job``),
conditional on the attempt read here, so a click or another process in between wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import and_, exists, func, select
from sqlalchemy.orm import Session

from speechbatch.adapters.models import ItemStatus, JobStatus, RunOutcome
from speechbatch.adapters.repositories.tables import items, jobs, runs

RESUME = "resume"


@dataclass(frozen=True)
class ResumableJob:
    """An interrupted job, and the attempt its resume must find unchanged."""

    job_id: int
    organization_id: int
    attempt: int


class Resumes(Protocol):
    """What the resume tick needs: the jobs it may resume."""

    def find_resumable_jobs(self, *, max_streak: int, limit: int) -> list[ResumableJob]: ...


class ResumeRepository:
    """Reads for resuming interrupted runs (one session; nothing here writes)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def find_resumable_jobs(self, *, max_streak: int, limit: int) -> list[ResumableJob]:
        """Jobs whose last run ended INTERRUPTED and that may be resumed without a click."""
        last = runs.alias("last_run")
        resumed = runs.alias("resumed")
        by_person = runs.alias("by_person")
        last_by_person = (
            select(func.coalesce(func.max(by_person.c.attempt), 0))
            .where(by_person.c.job_id == jobs.c.id, by_person.c.kind != RESUME)
            .scalar_subquery()
        )
        fruitless_resumes = (
            select(func.count())
            .select_from(resumed)
            .where(
                resumed.c.job_id == jobs.c.id,
                resumed.c.kind == RESUME,
                resumed.c.attempt > last_by_person,
                ~exists().where(
                    items.c.job_id == jobs.c.id,
                    items.c.status == ItemStatus.DONE,
                    items.c.updated_at > resumed.c.started_at,
                ),
            )
            .scalar_subquery()
        )
        rows = self.session.execute(
            select(jobs.c.id, jobs.c.organization_id, jobs.c.attempt)
            .select_from(
                jobs.join(last, and_(last.c.job_id == jobs.c.id, last.c.attempt == jobs.c.attempt))
            )
            .where(
                jobs.c.status == JobStatus.FAILED,
                last.c.outcome == RunOutcome.INTERRUPTED,
                exists().where(items.c.job_id == jobs.c.id, items.c.status != ItemStatus.DONE),
                fruitless_resumes < max_streak,
            )
            .order_by(jobs.c.id)
            .limit(limit)
        ).all()
        return [ResumableJob(int(r.id), int(r.organization_id), int(r.attempt)) for r in rows]
