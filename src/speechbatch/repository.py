"""The only place that builds SQL.

Every compare-and-set is one named method that returns whether it won; callers never
look at row counts. Methods run inside the caller's unit of work and never commit.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Float,
    Integer,
    Select,
    String,
    Table,
    Text,
    and_,
    bindparam,
    case,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    type_coerce,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .db import UTCDateTime, ago, db_now
from .models import (
    ApiToken,
    Id,
    Item,
    ItemStatus,
    Job,
    JobStatus,
    Organization,
    Run,
    RunOutcome,
    User,
    Worker,
)

jobs = cast(Table, Job.__table__)
items = cast(Table, Item.__table__)
runs = cast(Table, Run.__table__)
workers = cast(Table, Worker.__table__)
users = cast(Table, User.__table__)


@dataclass(frozen=True)
class UserRecord:
    """A signed-in principal."""

    id: int
    organization_id: int
    email: str
    password_hash: str


@dataclass(frozen=True)
class StaleJob:
    """A GENERATING job that looked dead when read, and why."""

    job_id: int
    attempt: int
    reason: str  # "lease" or "worker"
    worker: str | None


@dataclass(frozen=True)
class StartedItem:
    """What a run needs to send an item it has just marked GENERATING."""

    text: str
    previous_audio_path: str | None
    # An item of the organization whose finished audio answers the same request.
    reusable_item_id: int | None = None


@dataclass(frozen=True)
class FinishedItem:
    """The answer of a fenced finish: whether it won, and what it replaced."""

    won: bool
    replaced_still_referenced: bool = False

    def __bool__(self) -> bool:
        return self.won


@dataclass(frozen=True)
class RunPlan:
    """What a run needs before its first item: the job's voice, owner and items to send."""

    voice: str
    organization_id: int
    regenerate: bool
    items: list[tuple[int, str]]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _progress_columns() -> list[Any]:
    """Per-status item counts of ``jobs.c.id`` as correlated scalar subqueries."""
    columns = []
    for status in (ItemStatus.PENDING, ItemStatus.GENERATING, ItemStatus.DONE, ItemStatus.ERROR):
        columns.append(
            select(func.count())
            .where(items.c.job_id == jobs.c.id, items.c.status == status)
            .scalar_subquery()
            .label(status.lower())
        )
    return columns


_SUMMARY_COLUMNS = [
    jobs.c.id,
    jobs.c.title,
    jobs.c.voice,
    jobs.c.status,
    jobs.c.attempt,
    jobs.c.error_message,
    jobs.c.created_at,
    jobs.c.updated_at,
    jobs.c.started_at,
    jobs.c.finished_at,
]


def _summary(row: Any) -> dict[str, Any]:
    m = row._mapping
    progress = {k: int(m[k]) for k in ("pending", "generating", "done", "error")}
    return {
        "id": m["id"],
        "title": m["title"],
        "voice": m["voice"],
        "status": m["status"],
        "attempt": m["attempt"],
        "error_message": m["error_message"],
        "created_at": _iso(m["created_at"]),
        "updated_at": _iso(m["updated_at"]),
        "started_at": _iso(m["started_at"]),
        "finished_at": _iso(m["finished_at"]),
        "progress": {"total": sum(progress.values()), **progress},
    }


def audio_url(job_id: int, item_id: int) -> str:
    """The root-relative API path of an item's audio."""
    return f"/api/jobs/{job_id}/items/{item_id}/audio"


class Repository:
    """Queries and compare-and-sets over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def ping(self) -> None:
        """One round trip to the database."""
        self.session.execute(select(literal(1))).scalar_one()

    # --- organizations, users, tokens -------------------------------------------------

    def get_or_create_organization(self, slug: str) -> int:
        """Return the organization's id, creating it if missing."""
        found = self.session.execute(
            select(Organization.id).where(Organization.slug == slug)
        ).scalar_one_or_none()
        if found is not None:
            return found
        return self.session.execute(
            insert(Organization).values(slug=slug).returning(Organization.id)
        ).scalar_one()

    def create_user(self, organization_id: int, email: str, password_hash: str) -> int | None:
        """Create a user; None when the email is taken."""
        try:
            with self.session.begin_nested():
                return self.session.execute(
                    insert(User)
                    .values(
                        organization_id=organization_id, email=email, password_hash=password_hash
                    )
                    .returning(User.id)
                ).scalar_one()
        except IntegrityError:
            return None

    def _user_where(self, *where: ColumnElement[bool]) -> UserRecord | None:
        row = self.session.execute(
            select(users.c.id, users.c.organization_id, users.c.email, users.c.password_hash).where(
                *where
            )
        ).first()
        return (
            UserRecord(row.id, row.organization_id, row.email, row.password_hash) if row else None
        )

    def get_user_by_email(self, email: str) -> UserRecord | None:
        """Find a user by email (case-insensitive)."""
        return self._user_where(func.lower(users.c.email) == email.lower())

    def get_user(self, user_id: int) -> UserRecord | None:
        """Find a user by id."""
        return self._user_where(users.c.id == user_id)

    def create_token(self, user_id: int, token_hash: str) -> None:
        """Store the hash of a new API token."""
        self.session.execute(insert(ApiToken).values(user_id=user_id, token_hash=token_hash))

    def get_user_by_token(self, token_hash: str) -> UserRecord | None:
        """Find the user that owns a token hash."""
        return self._user_where(
            users.c.id.in_(select(ApiToken.user_id).where(ApiToken.token_hash == token_hash))
        )

    # --- workers ----------------------------------------------------------------------

    def register_worker(self, hostname: str, pid: int) -> int:
        """Register a new process start; every start is a new identity."""
        return self.session.execute(
            insert(Worker).values(hostname=hostname, pid=pid).returning(Worker.id)
        ).scalar_one()

    def heartbeat_worker(self, worker_id: int) -> None:
        """Stamp a worker's heartbeat with the database's clock."""
        self.session.execute(
            update(workers).where(workers.c.id == worker_id).values(heartbeat_at=db_now())
        )

    def mark_worker_stopped(self, worker_id: int) -> None:
        """Record that a worker stopped on purpose."""
        self.session.execute(
            update(workers).where(workers.c.id == worker_id).values(stopped_at=db_now())
        )

    # --- jobs -------------------------------------------------------------------------

    def create_job(
        self,
        organization_id: int,
        user_id: int | None,
        title: str,
        voice: str,
        texts: Sequence[str],
    ) -> int:
        """Insert a job and its items; return the job's id."""
        job_id: int = self.session.execute(
            insert(jobs)
            .values(
                organization_id=organization_id,
                created_by_id=user_id,
                title=title,
                voice=voice,
                status=JobStatus.PENDING,
                attempt=0,
            )
            .returning(jobs.c.id)
        ).scalar_one()
        self.session.execute(
            insert(items),
            [
                {"job_id": job_id, "position": i, "text": t, "status": ItemStatus.PENDING}
                for i, t in enumerate(texts, start=1)
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
        regenerating) with, for a plain generate, at least one item not DONE. Zero rows
        means somebody else holds it or there is nothing to do. ``kind`` names the run
        (default: generate or regenerate); with ``expected_attempt`` the claim wins only
        if no other claim came since that attempt was read (a resume by the system).
        """
        claimable = [JobStatus.PENDING, JobStatus.FAILED]
        where = [jobs.c.id == job_id, jobs.c.organization_id == organization_id]
        if expected_attempt is not None:
            where.append(jobs.c.attempt == expected_attempt)
        if regenerate:
            claimable.append(JobStatus.COMPLETED)
        else:
            where.append(
                exists().where(items.c.job_id == jobs.c.id, items.c.status != ItemStatus.DONE)
            )
        now = db_now()
        claim = (
            update(jobs)
            .where(*where, jobs.c.status.in_(claimable))
            .values(
                status=JobStatus.GENERATING,
                attempt=jobs.c.attempt + 1,
                error_message=None,
                started_at=now,
                finished_at=None,
                updated_at=now,
            )
            .returning(jobs.c.id, jobs.c.attempt)
        )
        # Items are reset at the claim; a regenerate keeps the old audio downloadable
        # until each item's new audio replaces it.
        reset = update(items).values(
            status=ItemStatus.PENDING, error_message=None, updated_at=db_now()
        )
        if not regenerate:
            reset = reset.where(items.c.status != ItemStatus.DONE)
        run = {
            "kind": kind or ("regenerate" if regenerate else "generate"),
            "started_by_id": user_id,
            "worker_id": worker_id,
            "outcome": RunOutcome.RUNNING,
        }
        if self.session.get_bind().dialect.name == "postgresql":
            # One round trip: the claim, the item reset and the run row as one statement
            # (data-modifying CTEs). Losers wait on the job row, re-check it, write nothing.
            claimed = claim.cte("claimed")
            reset_cte = (
                reset.where(items.c.job_id.in_(select(claimed.c.id)))
                .returning(items.c.id)
                .cte("reset")
            )
            opened = (
                insert(runs)
                .from_select(
                    ["job_id", "attempt", *run, "started_at"],
                    select(claimed.c.id, claimed.c.attempt, *map(literal, run.values()), now),
                )
                .returning(runs.c.id)
                .cte("opened")
            )
            attempt = self.session.execute(
                select(claimed.c.attempt).add_cte(reset_cte, opened)
            ).scalar_one_or_none()
            return None if attempt is None else int(attempt)
        row = self.session.execute(claim).first()
        if row is None:
            return None
        self.session.execute(reset.where(items.c.job_id == job_id))
        self.session.execute(
            insert(runs).values(job_id=job_id, attempt=row.attempt, started_at=now, **run)
        )
        return int(row.attempt)

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

    def job_exists(self, job_id: int, organization_id: int) -> bool:
        """Whether the job exists in that organization."""
        return (
            self.session.execute(
                select(jobs.c.id).where(
                    jobs.c.id == job_id, jobs.c.organization_id == organization_id
                )
            ).first()
            is not None
        )

    def get_job_view(
        self,
        job_id: int,
        organization_id: int,
        *,
        lease_seconds: float | None = None,
        worker_dead_seconds: float | None = None,
    ) -> dict[str, Any] | None:
        """The job as the API shows it: summary, lease, items and runs, in three queries.

        Given the lease settings, the view also says (``needs_recovery``) whether the job
        looks dead or has orphan items, so that the common read needs no separate
        recovery pass.
        """
        liveness = lease_seconds is not None and worker_dead_seconds is not None
        row = self.session.execute(
            _job_view_statements(liveness)[0],
            {
                "job_id": job_id,
                "organization_id": organization_id,
                "lease_seconds": float(lease_seconds or 0),
                "worker_dead_seconds": float(worker_dead_seconds or 0),
            },
        ).first()
        if row is None:
            return None
        _, items_stmt, runs_stmt = _job_view_statements(liveness)
        view = _summary(row)
        if liveness:
            view["needs_recovery"] = bool(row.needs_recovery)
        newest = row.updated_at
        if row.newest_item_at is not None:
            newest = max(newest, row.newest_item_at)
        view["lease"] = {
            "worker": f"{row.hostname}:{row.pid}" if row.hostname else None,
            "worker_heartbeat_at": _iso(row.heartbeat_at),
            "last_progress_at": _iso(newest),
            "reclaim_count": int(row.reclaims),
        }
        view["items"] = [
            {
                "id": r.id,
                "position": r.position,
                "text": r.text,
                "status": r.status,
                "error_message": r.error_message,
                "audio_url": audio_url(job_id, r.id) if r.audio_path else None,
                "reused": bool(r.reused),
                "updated_at": _iso(r.updated_at),
            }
            for r in self.session.execute(items_stmt, {"job_id": job_id})
        ]
        view["runs"] = [
            {
                "attempt": r.attempt,
                "kind": r.kind,
                "outcome": r.outcome,
                "started_at": _iso(r.started_at),
                "finished_at": _iso(r.finished_at),
                "error_message": r.error_message,
                "started_by": r.started_by,
                "cancelled_by": r.cancelled_by,
                "billed_characters": int(r.billed_characters),
                "provider_calls": int(r.provider_calls),
                "worker": f"{r.hostname}:{r.pid}" if r.hostname else None,
            }
            for r in self.session.execute(runs_stmt, {"job_id": job_id})
        ]
        return view

    def list_job_summaries(
        self,
        organization_id: int,
        *,
        status: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Job summaries of an organization, newest first."""
        stmt = (
            select(*_SUMMARY_COLUMNS, *_progress_columns())
            .where(jobs.c.organization_id == organization_id)
            .order_by(jobs.c.id.desc())
            .offset(offset)
        )
        if status:
            stmt = stmt.where(jobs.c.status == status)
        if limit is not None:
            stmt = stmt.limit(limit)
        return [_summary(r) for r in self.session.execute(stmt)]

    def count_jobs(self, organization_id: int, *, status: str | None = None) -> int:
        """How many jobs an organization has (optionally of one status)."""
        stmt = select(func.count()).where(jobs.c.organization_id == organization_id)
        if status:
            stmt = stmt.where(jobs.c.status == status)
        return int(self.session.execute(stmt).scalar_one())

    def item_audio(self, job_id: int, item_id: int, organization_id: int) -> str | None:
        """The storage key of an item's audio, if it has any and the job is the org's."""
        return self.session.execute(
            select(items.c.audio_path)
            .join(jobs, jobs.c.id == items.c.job_id)
            .where(
                items.c.id == item_id,
                items.c.job_id == job_id,
                jobs.c.organization_id == organization_id,
            )
        ).scalar_one_or_none()

    # --- the run: fenced progress stamps ---------------------------------------------

    def run_plan(self, job_id: int, attempt: int) -> RunPlan:
        """The job's voice and organization, whether the run regenerates, and the (id, text)
        of the items still to send, in order."""
        job = self.session.execute(
            select(jobs.c.voice, jobs.c.organization_id, runs.c.kind)
            .select_from(jobs)
            .outerjoin(runs, and_(runs.c.job_id == jobs.c.id, runs.c.attempt == attempt))
            .where(jobs.c.id == job_id)
        ).one()
        pending = self.session.execute(
            select(items.c.id, items.c.text)
            .where(items.c.job_id == job_id, items.c.status == ItemStatus.PENDING)
            .order_by(items.c.position)
        ).all()
        regenerate = job.kind == "regenerate"
        return RunPlan(
            job.voice, job.organization_id, regenerate, [(r.id, r.text) for r in pending]
        )

    def stamp_job_progress(self, job_id: int, attempt: int) -> bool:
        """Fence and heartbeat: stamp the job if it is still GENERATING at ``attempt``.

        The UPDATE takes the job row's lock until commit, so recovery and this stamp
        are serialized on that row. False means this run was declared dead or
        superseded: it must write nothing more.
        """
        stamp = _item_statements()["stamp"]
        return (
            self.session.execute(stamp, {"p_job": job_id, "p_attempt": attempt}).first() is not None
        )

    def start_item(
        self, job_id: int, attempt: int, item_id: int, *, reuse_fingerprint: str | None = None
    ) -> StartedItem | None:
        """Fenced: mark a PENDING item GENERATING; None when fenced or already taken.

        With ``reuse_fingerprint``, the same statement looks up the newest finished audio
        of that fingerprint (one index probe) and names its item in the answer.
        """
        if not self.stamp_job_progress(job_id, attempt):
            return None
        start = _item_statements()["start"]
        row = self.session.execute(
            start, {"p_job": job_id, "p_item": item_id, "p_fp": reuse_fingerprint}
        ).first()
        if row is None:
            return None
        return StartedItem(
            text=row.text, previous_audio_path=row.audio_path, reusable_item_id=row.reusable_id
        )

    def reuse_audio(self, job_id: int, item_id: int, source_item_id: int, fingerprint: str) -> bool:
        """Compare-and-set: make a PENDING or GENERATING item DONE with another item's audio.

        Runs inside a transaction that has already fenced (stamped) the run. False when
        the item was not ours to finish or the source has no finished audio any more.
        """
        reuse = _item_statements()["reuse"]
        params = {"p_job": job_id, "p_item": item_id, "p_src": source_item_id, "p_fp": fingerprint}
        return self.session.execute(reuse, params).first() is not None

    def reuse_audio_fenced(
        self, job_id: int, attempt: int, item_id: int, source_item_id: int, fingerprint: str
    ) -> bool:
        """Fenced: a duplicate of an item this run has just finished shares its audio."""
        if not self.stamp_job_progress(job_id, attempt):
            return False
        return self.reuse_audio(job_id, item_id, source_item_id, fingerprint)

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
        says whether any other item still refers to that file, in the same statement.
        """
        if not self.stamp_job_progress(job_id, attempt):
            return FinishedItem(won=False)
        params: dict[str, Any] = {"p_job": job_id, "p_item": item_id}
        if error_message is None:
            stmt = _item_statements()["done"]
            params.update(
                p_path=audio_path,
                p_bytes=audio_bytes,
                p_sha=audio_sha256,
                p_fp=fingerprint,
                p_old=replaced_audio_path,
            )
        else:
            stmt = _item_statements()["error"]
            params["p_message"] = error_message
        row = self.session.execute(stmt, params).first()
        if row is None:
            return FinishedItem(won=False)
        referenced = error_message is None and bool(row.still_referenced)
        return FinishedItem(won=True, replaced_still_referenced=referenced)

    def return_item(self, job_id: int, attempt: int, item_id: int) -> bool:
        """Fenced: put a GENERATING item back to PENDING (its next call did not fit the budget)."""
        if not self.stamp_job_progress(job_id, attempt):
            return False
        back = _item_statements()["return"]
        return self.session.execute(back, {"p_job": job_id, "p_item": item_id}).first() is not None

    def _end_run(
        self, job_id: int, attempt: int, outcome: str, message: str | None, **extra: Any
    ) -> None:
        self.session.execute(
            update(runs)
            .where(
                runs.c.job_id == job_id,
                runs.c.attempt == attempt,
                runs.c.outcome == RunOutcome.RUNNING,
            )
            .values(outcome=outcome, finished_at=db_now(), error_message=message, **extra)
        )

    def _fail_in_flight_items(self, job_id: int, message: str) -> None:
        self.session.execute(
            update(items)
            .where(items.c.job_id == job_id, items.c.status == ItemStatus.GENERATING)
            .values(status=ItemStatus.ERROR, error_message=message, updated_at=db_now())
        )

    def _end_job(
        self, job_id: int, attempt: int, failure_message: str, *extra: ColumnElement[bool]
    ) -> str | None:
        """Conditionally end a GENERATING job: COMPLETED when every item is DONE."""
        not_done = exists().where(items.c.job_id == jobs.c.id, items.c.status != ItemStatus.DONE)
        now = db_now()
        return self.session.execute(
            update(jobs)
            .where(
                jobs.c.id == job_id,
                jobs.c.status == JobStatus.GENERATING,
                jobs.c.attempt == attempt,
                *extra,
            )
            .values(
                status=case((not_done, JobStatus.FAILED), else_=JobStatus.COMPLETED),
                error_message=case((not_done, failure_message), else_=None),
                finished_at=now,
                updated_at=now,
            )
            .returning(jobs.c.status)
        ).scalar_one_or_none()

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
        counts: dict[str, int] = dict(
            self.session.execute(
                select(items.c.status, func.count())
                .where(items.c.job_id == job_id)
                .group_by(items.c.status)
            ).all()
        )
        failed = sum(v for k, v in counts.items() if k != ItemStatus.DONE)
        message = run_error or over_budget or f"{failed} of {sum(counts.values())} items failed"
        status = self._end_job(job_id, attempt, message)
        if status is None:
            return None
        if status == JobStatus.COMPLETED:
            self._end_run(job_id, attempt, RunOutcome.COMPLETED, None)
        elif over_budget and not run_error:
            self._end_run(job_id, attempt, RunOutcome.OVER_BUDGET, message)
        else:
            self._end_run(job_id, attempt, RunOutcome.FAILED, message)
        return status

    def interrupt_run(self, job_id: int, attempt: int, message: str) -> bool:
        """Fenced: end a run stopped on purpose (SIGTERM); the job becomes retryable."""
        if not self.stamp_job_progress(job_id, attempt):
            return False
        self._fail_in_flight_items(job_id, message)
        status = self._end_job(job_id, attempt, message)
        if status is None:
            return False
        self._end_run(job_id, attempt, RunOutcome.INTERRUPTED, message)
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
        status = self._end_job(job_id, attempt, message)
        if status is None:
            return False
        self.session.execute(
            update(items)
            .where(items.c.job_id == job_id, items.c.status == ItemStatus.GENERATING)
            .values(status=ItemStatus.PENDING, updated_at=db_now())
        )
        self._end_run(job_id, attempt, RunOutcome.CANCELLED, message, cancelled_by_id=user_id)
        return True

    # --- recovery ---------------------------------------------------------------------

    @staticmethod
    def _stale_progress(lease_seconds: float | ColumnElement[float]) -> ColumnElement[bool]:
        """The job's newest progress signal (its own or an item's) is older than the lease."""
        cutoff = ago(lease_seconds)
        return and_(
            jobs.c.updated_at < cutoff,
            ~exists()
            .where(items.c.job_id == jobs.c.id, items.c.updated_at >= cutoff)
            .correlate(jobs),
        )

    @staticmethod
    def _dead_worker(worker_dead_seconds: float | ColumnElement[float]) -> ColumnElement[bool]:
        """The process running the job's current run stopped heartbeating (or stopped)."""
        return (
            select(1)
            .select_from(runs.join(workers, workers.c.id == runs.c.worker_id))
            .where(
                runs.c.job_id == jobs.c.id,
                runs.c.attempt == jobs.c.attempt,
                or_(
                    workers.c.heartbeat_at < ago(worker_dead_seconds),
                    workers.c.stopped_at.is_not(None),
                ),
            )
            .correlate(jobs)
            .exists()
        )

    def find_stale_jobs(
        self,
        *,
        lease_seconds: float,
        worker_dead_seconds: float,
        organization_id: int | None = None,
        job_id: int | None = None,
    ) -> list[StaleJob]:
        """GENERATING jobs that look dead now (read only; recovery re-checks)."""
        stale = self._stale_progress(lease_seconds)
        dead = self._dead_worker(worker_dead_seconds)
        stmt = (
            select(
                jobs.c.id,
                jobs.c.attempt,
                case((stale, literal("lease")), else_=literal("worker")).label("reason"),
                workers.c.hostname,
                workers.c.pid,
            )
            .select_from(
                jobs.outerjoin(
                    runs, and_(runs.c.job_id == jobs.c.id, runs.c.attempt == jobs.c.attempt)
                ).outerjoin(workers, workers.c.id == runs.c.worker_id)
            )
            .where(jobs.c.status == JobStatus.GENERATING, or_(stale, dead))
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
            still_dead = self._stale_progress(lease_seconds)
        else:
            still_dead = self._dead_worker(worker_dead_seconds)
        status = self._end_job(stale.job_id, stale.attempt, message, still_dead)
        if status is None:
            return False
        self._fail_in_flight_items(stale.job_id, message)
        self._end_run(stale.job_id, stale.attempt, RunOutcome.RECOVERED, message)
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

    def recover_orphan_items(self, job_id: int, message: str) -> bool:
        """Fail items left GENERATING after their job ended; False if the job is live again.

        The job's row is locked first so that a claim cannot slip in between the check
        and the write (a subquery alone would keep the statement's snapshot).
        """
        ended = self.session.execute(
            select(jobs.c.id)
            .where(jobs.c.id == job_id, jobs.c.status != JobStatus.GENERATING)
            .with_for_update(read=True)
        ).first()
        if ended is None:
            return False
        self._fail_in_flight_items(job_id, message)
        return True


@functools.cache
def _job_view_statements(liveness: bool) -> tuple[Select[Any], Select[Any], Select[Any]]:
    """The job view's three statements, built once (parameters: job_id, organization_id,
    lease_seconds, worker_dead_seconds) since building them costs more than running them."""
    job_id = bindparam("job_id", type_=Id)
    current_run = runs.alias("current_run")
    current_worker = workers.alias("current_worker")
    newest_item = (
        select(type_coerce(func.max(items.c.updated_at), UTCDateTime()))
        .where(items.c.job_id == jobs.c.id)
        .correlate(jobs)
        .scalar_subquery()
    )
    reclaims = (
        select(func.count())
        .where(runs.c.job_id == jobs.c.id, runs.c.outcome == RunOutcome.RECOVERED)
        .correlate(jobs)
        .scalar_subquery()
    )
    columns = [
        *_SUMMARY_COLUMNS,
        *_progress_columns(),
        newest_item.label("newest_item_at"),
        reclaims.label("reclaims"),
        current_worker.c.hostname,
        current_worker.c.pid,
        current_worker.c.heartbeat_at,
    ]
    if liveness:
        generating = jobs.c.status == JobStatus.GENERATING
        looks_dead = or_(
            and_(
                generating,
                or_(
                    Repository._stale_progress(bindparam("lease_seconds", type_=Float)),
                    Repository._dead_worker(bindparam("worker_dead_seconds", type_=Float)),
                ),
            ),
            and_(
                ~generating,
                exists()
                .where(items.c.job_id == jobs.c.id, items.c.status == ItemStatus.GENERATING)
                .correlate(jobs),
            ),
        )
        columns.append(case((looks_dead, True), else_=False).label("needs_recovery"))
    summary = (
        select(*columns)
        .select_from(
            jobs.outerjoin(
                current_run,
                and_(current_run.c.job_id == jobs.c.id, current_run.c.attempt == jobs.c.attempt),
            ).outerjoin(current_worker, current_worker.c.id == current_run.c.worker_id)
        )
        .where(
            jobs.c.id == job_id, jobs.c.organization_id == bindparam("organization_id", type_=Id)
        )
    )
    item_rows = (
        select(
            items.c.id,
            items.c.position,
            items.c.text,
            items.c.status,
            items.c.error_message,
            items.c.audio_path,
            items.c.reused,
            items.c.updated_at,
        )
        .where(items.c.job_id == job_id)
        .order_by(items.c.position)
    )
    canceller = users.alias("canceller")
    run_rows = (
        select(
            runs.c.attempt,
            runs.c.kind,
            runs.c.outcome,
            runs.c.started_at,
            runs.c.finished_at,
            runs.c.error_message,
            users.c.email.label("started_by"),
            canceller.c.email.label("cancelled_by"),
            runs.c.billed_characters,
            runs.c.provider_calls,
            workers.c.hostname,
            workers.c.pid,
        )
        .select_from(
            runs.outerjoin(users, users.c.id == runs.c.started_by_id)
            .outerjoin(canceller, canceller.c.id == runs.c.cancelled_by_id)
            .outerjoin(workers, workers.c.id == runs.c.worker_id)
        )
        .where(runs.c.job_id == job_id)
        .order_by(runs.c.attempt)
    )
    return summary, item_rows, run_rows


@functools.cache
def _item_statements() -> dict[str, Any]:
    """The run's per-item statements, built once: they run four times per item."""
    job_id, item_id = bindparam("p_job", type_=Id), bindparam("p_item", type_=Id)
    this_item = (items.c.id == item_id, items.c.job_id == job_id)
    path, sha = bindparam("p_path", type_=String), bindparam("p_sha", type_=String)
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

    def of_source(column: Any) -> Any:
        return select(column).where(src.c.id == source_id).scalar_subquery()

    return {
        "stamp": update(jobs)
        .where(
            jobs.c.id == job_id,
            jobs.c.status == JobStatus.GENERATING,
            jobs.c.attempt == bindparam("p_attempt", type_=Integer),
        )
        .values(updated_at=db_now())
        .returning(jobs.c.id),
        "start": update(items)
        .where(*this_item, items.c.status == ItemStatus.PENDING)
        .values(status=ItemStatus.GENERATING, error_message=None, updated_at=db_now())
        .returning(items.c.text, items.c.audio_path, reusable.label("reusable_id")),
        "reuse": update(items)
        .where(
            *this_item,
            items.c.status.in_([ItemStatus.PENDING, ItemStatus.GENERATING]),
            exists().where(
                src.c.id == source_id,
                src.c.status == ItemStatus.DONE,
                src.c.audio_path.is_not(None),
            ),
        )
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
        "return": update(items)
        .where(*this_item, items.c.status == ItemStatus.GENERATING)
        .values(status=ItemStatus.PENDING, updated_at=db_now())
        .returning(items.c.id),
        "done": update(items)
        .where(
            *this_item,
            or_(
                items.c.status == ItemStatus.GENERATING,
                # The same write again (a retry after a lost commit ack) wins again.
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
            exists()
            .where(src.c.audio_path == bindparam("p_old", type_=String), src.c.id != item_id)
            .label("still_referenced"),
        ),
        "error": update(items)
        .where(*this_item, items.c.status == ItemStatus.GENERATING)
        .values(
            status=ItemStatus.ERROR,
            error_message=bindparam("p_message", type_=Text),
            updated_at=db_now(),
        )
        .returning(items.c.id),
    }
