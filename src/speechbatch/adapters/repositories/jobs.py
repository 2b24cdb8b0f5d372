"""Jobs: creation and the claim (a compare-and-set that opens the run).

The job row carries progress counters (one per item status) that every statement
moving items keeps, and a ``version`` that every write of the row bumps (the read
side's ETag).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy import (
    ColumnElement,
    Integer,
    String,
    bindparam,
    cast,
    func,
    insert,
    literal,
    select,
    union_all,
    update,
)
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import Id, ItemStatus, JobStatus, RunOutcome
from speechbatch.adapters.repositories.tables import COUNTERS, items, jobs, retired_ids, runs
from speechbatch.adapters.repositories.tables import chapters as chapter_rows


class Jobs(Protocol):
    """What the services and the runner need of jobs and runs."""

    def create_job(
        self,
        organization_id: int,
        user_id: int | None,
        title: str,
        voice: str,
        texts: Sequence[str],
        *,
        keys: Sequence[str | None] | None = None,
        item_chapters: Sequence[int] | None = None,
        chapters: Sequence[tuple[int, str, int]] | None = None,
        options: str = "{}",
        speakers: Sequence[str | None] | None = None,
    ) -> int: ...

    def claim_job(
        self,
        job_id: int,
        organization_id: int,
        *,
        regenerate: bool,
        user_id: int | None,
        worker_id: int | None,
        kind: str | None = None,
        expected_attempt: int | None = None,
    ) -> int | None: ...

    def claim_refusal(self, job_id: int, organization_id: int) -> str: ...


def total_items() -> ColumnElement[int]:
    """The job's number of items, from its counters."""
    return not_done_items() + jobs.c.items_done


def not_done_items() -> ColumnElement[int]:
    """The job's items that are not DONE, from its counters."""
    return jobs.c.items_pending + jobs.c.items_generating + jobs.c.items_error


def fail_in_flight_counters() -> dict[str, ColumnElement[int]]:
    """Counter assignments for every GENERATING item of the job going to ERROR."""
    return {
        jobs.c.items_error.key: jobs.c.items_error + jobs.c.items_generating,
        jobs.c.items_generating.key: literal(0),
    }


class JobsRepository:
    """Commands and compare-and-sets on jobs, items and runs, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def _new_id(self) -> dict[str, Any]:
        """On SQLite, a new job's id above every id a job ever had (``RetiredId``);
        PostgreSQL's sequence never gives one twice."""
        if self.session.get_bind().dialect.name != "sqlite":
            return {}
        highest = union_all(
            select(func.max(jobs.c.id).label("id")),
            select(retired_ids.c.last_id.label("id")).where(retired_ids.c.table_name == "jobs"),
        ).subquery()
        return {"id": select(func.coalesce(func.max(highest.c.id), 0) + 1).scalar_subquery()}

    def create_job(
        self,
        organization_id: int,
        user_id: int | None,
        title: str,
        voice: str,
        texts: Sequence[str],
        *,
        keys: Sequence[str | None] | None = None,
        item_chapters: Sequence[int] | None = None,
        chapters: Sequence[tuple[int, str, int]] | None = None,
        options: str = "{}",
        speakers: Sequence[str | None] | None = None,
    ) -> int:
        """Insert a job (``options`` as stored JSON), its items (with their keys, chapter
        indexes and speakers, when given) and its chapters (``(index, title,
        first_position)``); return the job's id."""
        job_id: int = self.session.execute(
            insert(jobs)
            .values(
                **self._new_id(),
                organization_id=organization_id,
                created_by_id=user_id,
                title=title,
                voice=voice,
                status=JobStatus.PENDING,
                attempt=0,
                items_pending=len(texts),
                version=1,
                options=options,
            )
            .returning(jobs.c.id)
        ).scalar_one()
        self.session.execute(
            insert(items),
            [
                {
                    "job_id": job_id,
                    "position": i,
                    "text": t,
                    "status": ItemStatus.PENDING,
                    "key": keys[i - 1] if keys else None,
                    "chapter": item_chapters[i - 1] if item_chapters else None,
                    "speaker": speakers[i - 1] if speakers else None,
                }
                for i, t in enumerate(texts, start=1)
            ],
        )
        if chapters:
            self.session.execute(
                insert(chapter_rows),
                [
                    {"job_id": job_id, "index": n, "title": t, "first_position": first}
                    for n, t, first in chapters
                ],
            )
        return int(job_id)

    def claim_job(
        self,
        job_id: int,
        organization_id: int,
        *,
        regenerate: bool,
        user_id: int | None,
        worker_id: int | None,
        kind: str | None = None,
        expected_attempt: int | None = None,
    ) -> int | None:
        """Flip a claimable job to GENERATING, open its run; return the new attempt or None.

        One conditional UPDATE decides: PENDING or FAILED (and COMPLETED when
        regenerating) with, for a plain generate, at least one item not DONE (read from
        the counters). Zero rows means somebody else holds it or there is nothing to do.
        A plain generate touches no item: the run starts every item that is not DONE.
        A regenerate resets every item to PENDING here, as the contract says.
        ``kind`` names the run (default generate or regenerate); with
        ``expected_attempt`` the claim wins only if no other claim came since that
        attempt was read (the system's resume after a deploy).
        """
        statements = _claim_statements(regenerate)
        params = {
            "p_job": job_id,
            "p_org": organization_id,
            "p_user": user_id,
            "p_worker": worker_id,
            "p_kind": kind or ("regenerate" if regenerate else "generate"),
            "p_expected": expected_attempt,
        }
        # Core statements on the session's connection: the ORM's execute path (its
        # compile-state lookups and events) has nothing to do for them.
        connection = self.session.connection()
        if connection.dialect.name == "postgresql":
            # One round trip: the claim (and a regenerate's reset) and the run row.
            attempt = connection.execute(statements["pg"], params).scalar_one_or_none()
            return None if attempt is None else int(attempt)
        attempt = connection.execute(statements["claim"], params).scalar_one_or_none()
        if attempt is None:
            return None
        if regenerate:
            connection.execute(statements["reset"], params)
        connection.execute(statements["run"], {**params, "p_attempt": attempt})
        return int(attempt)

    def claim_refusal(self, job_id: int, organization_id: int) -> str:
        """Why a claim was refused: not_found, already_generating or nothing_to_generate."""
        status = self.session.execute(
            select(jobs.c.status).where(
                jobs.c.id == job_id, jobs.c.organization_id == organization_id
            )
        ).scalar_one_or_none()
        if status is None:
            return "not_found"
        if status == JobStatus.GENERATING:
            return "already_generating"
        return "nothing_to_generate"


def _claimable(regenerate: bool) -> tuple[list[ColumnElement[bool]], dict[str, Any]]:
    """The claim's guard on the job row, and the counters a regenerate resets."""
    job_id, org_id = bindparam("p_job", type_=Id), bindparam("p_org", type_=Id)
    claimable = [JobStatus.PENDING, JobStatus.FAILED]
    where: list[ColumnElement[bool]] = [
        jobs.c.id == job_id,
        jobs.c.organization_id == org_id,
        # No expected attempt (a click): any; else only the attempt that was read.
        func.coalesce(bindparam("p_expected", type_=Integer), jobs.c.attempt) == jobs.c.attempt,
    ]
    counters: dict[str, Any] = {}
    if regenerate:
        claimable.append(JobStatus.COMPLETED)
        counters = {c.key: literal(0) for c in COUNTERS.values()}
        counters[jobs.c.items_pending.key] = total_items()
    else:
        where.append(not_done_items() > 0)
    return [*where, jobs.c.status.in_(claimable)], counters


def claim_update(regenerate: bool, *returning: Any) -> Any:
    """The compare-and-set: a claimable job goes GENERATING at the next attempt."""
    where, counters = _claimable(regenerate)
    now = db_now()
    return (
        update(jobs)
        .where(*where)
        .values(
            status=JobStatus.GENERATING,
            attempt=jobs.c.attempt + 1,
            error_message=None,
            started_at=now,
            finished_at=None,
            updated_at=now,
            version=jobs.c.version + 1,
            **counters,
        )
        .returning(*returning)
    )


@functools.cache
def _claim_statements(regenerate: bool) -> dict[str, Any]:
    """The claim's statements, built once (parameters p_job, p_org, p_user, p_worker,
    p_kind, p_expected)."""
    job_id = bindparam("p_job", type_=Id)
    now = db_now()
    # A regenerate keeps the old audio downloadable until each item's new audio replaces it.
    reset = update(items).values(status=ItemStatus.PENDING, error_message=None, updated_at=now)
    run: dict[str, ColumnElement[Any]] = {
        "kind": cast(bindparam("p_kind", type_=String), String(20)),
        "started_by_id": bindparam("p_user", type_=Id),
        "worker_id": bindparam("p_worker", type_=Id),
        "outcome": literal(RunOutcome.RUNNING),
    }
    claimed = claim_update(regenerate, jobs.c.id, jobs.c.attempt).cte("claimed")
    opened = (
        insert(runs)
        .from_select(
            ["job_id", "attempt", *run, "started_at"],
            select(claimed.c.id, claimed.c.attempt, *list(run.values()), now),
        )
        .returning(runs.c.id)
        .cte("opened")
    )
    ctes: list[Any] = [opened]
    if regenerate:
        ctes.append(
            reset.where(items.c.job_id.in_(select(claimed.c.id))).returning(items.c.id).cte("reset")
        )
    return {
        # Losers wait on the job row, re-check it, and write nothing.
        "pg": select(claimed.c.attempt).add_cte(*ctes),
        "claim": claim_update(regenerate, jobs.c.attempt),
        "reset": reset.where(items.c.job_id == job_id),
        "run": insert(runs).values(
            job_id=job_id,
            attempt=bindparam("p_attempt", type_=Integer),
            started_at=now,
            **run,
        ),
    }
