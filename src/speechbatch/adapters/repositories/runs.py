"""A run's plan and its end: completed, failed, over budget, interrupted, cancelled.

The item moves of a run are in ``items.py`` (``ItemMoves``); ``RunsRepository`` has both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import ColumnElement, String, and_, case, cast, literal, select, update
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import ItemStatus, JobStatus, RunOutcome
from speechbatch.adapters.repositories.channels import share_notice
from speechbatch.adapters.repositories.items import STARTABLE, FinishedItem, ItemMoves, StartedItem
from speechbatch.adapters.repositories.jobs import (
    fail_in_flight_counters,
    not_done_items,
    total_items,
)
from speechbatch.adapters.repositories.tables import item_voice, items, jobs, runs
from speechbatch.adapters.repositories.webhooks import WebhooksRepository

__all__ = ["FinishedItem", "RunPlan", "Runs", "RunsRepository", "StartedItem"]


@dataclass(frozen=True)
class RunPlan:
    """What a run needs before its first item: the job's voice, options (stored JSON)
    and organization, whether it regenerates, and the (id, text, voice) of the items to
    send, in order (an item's voice is its speaker's in the cast, else the job's)."""

    voice: str
    organization_id: int
    regenerate: bool
    items: list[tuple[int, str, str]]
    options: str = "{}"


class Runs(Protocol):
    """What the runner needs: the fence, the fenced moves of one run, its end."""

    def run_plan(self, job_id: int, attempt: int) -> RunPlan: ...
    def stamp_job_progress(self, job_id: int, attempt: int) -> bool: ...
    def start_item(
        self, job_id: int, attempt: int, item_id: int, *, reuse_fingerprint: str | None = None
    ) -> StartedItem | None: ...
    def reuse_audio(
        self,
        job_id: int,
        attempt: int,
        item_id: int,
        source_item_id: int,
        fingerprint: str,
        *,
        spoken_text: str | None = None,
        keep: int = ...,
    ) -> FinishedItem: ...
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
        keep: int = ...,
        timing: str | None = None,
    ) -> FinishedItem: ...
    def return_item(self, job_id: int, attempt: int, item_id: int) -> bool: ...
    def mark_stale(self, job_id: int, item_id: int) -> None: ...
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


class RunsRepository(ItemMoves):
    """Fenced compare-and-sets of a run, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def run_plan(self, job_id: int, attempt: int) -> RunPlan:
        """The job's voice and organization, whether the run at ``attempt`` regenerates,
        and the (id, text, voice) of the items it must still send (not DONE), in order."""
        job = self.session.execute(
            select(
                jobs.c.voice, jobs.c.organization_id, jobs.c.options, runs.c.kind, runs.c.selected
            )
            .select_from(jobs)
            .outerjoin(runs, and_(runs.c.job_id == jobs.c.id, runs.c.attempt == attempt))
            .where(jobs.c.id == job_id)
        ).one()
        wanted = [items.c.job_id == job_id, items.c.status.in_(STARTABLE)]
        if job.selected is not None:
            # A selective regenerate sends only the items its claim picked.
            wanted.append(items.c.selected_for == attempt)
        startable = self.session.execute(
            select(items.c.id, items.c.text, item_voice().label("voice"))
            .join_from(items, jobs, jobs.c.id == items.c.job_id)
            .where(*wanted)
            .order_by(items.c.position)
        ).all()
        return RunPlan(
            job.voice,
            job.organization_id,
            job.kind == "regenerate",
            [(r.id, r.text, r.voice) for r in startable],
            job.options,
        )

    def end_run(
        self, job_id: int, attempt: int, outcome: str, message: str | None, **extra: Any
    ) -> None:
        """Record how a run ended (only while it is still RUNNING), and its webhook event
        (``job.completed`` or ``job.failed``) in the same transaction: every way a run
        ends (finish, interrupt, cancel, recovery) comes through here."""
        ended = self.session.execute(
            update(runs)
            .where(
                runs.c.job_id == job_id,
                runs.c.attempt == attempt,
                runs.c.outcome == RunOutcome.RUNNING,
            )
            .values(outcome=outcome, finished_at=db_now(), error_message=message, **extra)
            .returning(runs.c.id)
        ).first()
        if ended is not None:
            WebhooksRepository(self.session).record_job_event(job_id, attempt)

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
            # A run that ends may grow the other jobs' fair shares of the provider slots.
            .returning(
                jobs.c.status,
                jobs.c.error_message,
                *share_notice(self.session.get_bind().dialect.name),
            )
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
