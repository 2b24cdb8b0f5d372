"""The lexicon's dry runs (``lexicon_impacts``): what saving rules would make stale,
counted by background work in chunks, never in a request.

A request is stored ``pending``; any process's background tick claims it by
compare-and-set under a lease (``lease_token`` is the grant, ``lease_expires_at`` on the
database's clock) and walks the organization's DONE items in (job, position) order a
chunk at a time. Each chunk's counts are written with the cursor and the lease's
renewal in one statement that only the grant's holder wins, so a dead worker's request
is claimed again once its lease runs out and resumes from the cursor it last wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from sqlalchemy import ColumnElement, Table, and_, delete, func, insert, or_, select, update
from sqlalchemy.orm import Session

from speechbatch.adapters.db import ago, db_now, later
from speechbatch.adapters.models import LexiconImpact
from speechbatch.adapters.repositories.stale_marks import DoneItem, done_item_of, done_items_select
from speechbatch.adapters.repositories.tables import items, jobs

impacts = cast(Table, LexiconImpact.__table__)

PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"


@dataclass(frozen=True)
class ImpactClaim:
    """A dry run this process won: its id, organization and grant."""

    id: int
    organization_id: int
    token: int


@dataclass(frozen=True)
class ImpactProgress:
    """How far a dry run has read and what it counted: the cursor (the last item read,
    as its job and position), the last job that had a line counted, the lines that would
    become stale, their distinct jobs, the lines read, and all there are (None: not
    counted yet)."""

    after_job: int = 0
    after_position: int = -1
    counted_job: int = 0
    lines: int = 0
    jobs: int = 0
    checked: int = 0
    total: int | None = None


@dataclass(frozen=True)
class ImpactState:
    """A stored dry run: its rules (canonical JSON), the lexicon version it was asked
    under, its status and its progress."""

    id: int
    organization_id: int
    rules: str
    lexicon_version: int
    status: str
    progress: ImpactProgress


class Impacts(Protocol):
    """What the dry runs' service and background pass need."""

    def create_impact(self, organization_id: int, rules: str, lexicon_version: int) -> int: ...
    def impact(self, organization_id: int, impact_id: int) -> ImpactState | None: ...
    def finished_impact(
        self, organization_id: int, rules: str, lexicon_version: int
    ) -> ImpactState | None: ...
    def impact_due(self) -> bool: ...
    def claim_impact(self, lease_seconds: float) -> ImpactClaim | None: ...
    def count_done_items(self, organization_id: int) -> int: ...
    def done_items_after(
        self, organization_id: int, after_job: int, after_position: int, limit: int
    ) -> list[DoneItem]: ...
    def advance_impact(
        self, claim: ImpactClaim, progress: ImpactProgress, lease_seconds: float, finished: bool
    ) -> bool: ...
    def fail_impact(self, claim: ImpactClaim) -> bool: ...
    def release_impact(self, claim: ImpactClaim) -> None: ...
    def delete_old_impacts(self, seconds: float) -> int: ...


class ImpactRepository:
    """The dry runs' rows, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def create_impact(self, organization_id: int, rules: str, lexicon_version: int) -> int:
        """Store a pending dry run of ``rules`` (canonical JSON); its id."""
        new_id: int = self.session.execute(
            insert(impacts)
            .values(organization_id=organization_id, rules=rules, lexicon_version=lexicon_version)
            .returning(impacts.c.id)
        ).scalar_one()
        return int(new_id)

    def impact(self, organization_id: int, impact_id: int) -> ImpactState | None:
        """The organization's dry run of this id (None: none, or another's)."""
        row = self.session.execute(
            select(impacts).where(
                impacts.c.id == impact_id, impacts.c.organization_id == organization_id
            )
        ).first()
        return None if row is None else _state(row)

    def finished_impact(
        self, organization_id: int, rules: str, lexicon_version: int
    ) -> ImpactState | None:
        """The newest finished dry run of exactly these rules asked under this lexicon
        version (a save's count of what it made stale), None when there is none."""
        row = self.session.execute(
            select(impacts)
            .where(
                impacts.c.organization_id == organization_id,
                impacts.c.status == DONE,
                impacts.c.rules == rules,
                impacts.c.lexicon_version == lexicon_version,
            )
            .order_by(impacts.c.id.desc())
            .limit(1)
        ).first()
        return None if row is None else _state(row)

    def impact_due(self) -> bool:
        """Whether some dry run waits and no live lease holds it (a read: a tick that
        finds none takes no write lock)."""
        row = self.session.execute(select(impacts.c.id).where(_claimable(impacts)).limit(1))
        return row.first() is not None

    def claim_impact(self, lease_seconds: float) -> ImpactClaim | None:
        """Claim a waiting dry run (pending, or running under a lease that ran out) for
        ``lease_seconds``; None when there is none to win. The one whose lease ended
        longest ago (or never held one) goes first, then the oldest: a run that gave its
        turn back after a slice waits behind the others."""
        candidate = impacts.alias("candidate")
        first = (
            select(candidate.c.id)
            .where(_claimable(candidate))
            .order_by(candidate.c.lease_expires_at.nulls_first(), candidate.c.id)
            .limit(1)
            .scalar_subquery()
        )
        row = self.session.execute(
            update(impacts)
            .where(impacts.c.id == first, _claimable(impacts))
            .values(
                status=RUNNING,
                lease_token=impacts.c.lease_token + 1,
                lease_expires_at=later(lease_seconds),
            )
            .returning(impacts.c.id, impacts.c.organization_id, impacts.c.lease_token)
        ).first()
        return None if row is None else ImpactClaim(int(row[0]), int(row[1]), int(row[2]))

    def count_done_items(self, organization_id: int) -> int:
        """How many DONE items with a current take the organization has (the total a
        dry run reads)."""
        scan = done_items_select().where(jobs.c.organization_id == organization_id).subquery()
        return int(self.session.execute(select(func.count()).select_from(scan)).scalar_one())

    def done_items_after(
        self, organization_id: int, after_job: int, after_position: int, limit: int
    ) -> list[DoneItem]:
        """Up to ``limit`` of the organization's DONE items after the cursor, in (job,
        position) order: a job's items are contiguous, so distinct jobs count exactly
        across chunks. Fewer only when no more are left.

        Each read seeks and is bounded, on both databases: the rest of the cursor's job
        (its items after the position), then the next jobs by the index on
        (organization, id), only as many as their DONE counters say fill the chunk (a
        counter that is wrong costs another round, never a line). One query with ``job >
        a OR (job = a AND position > b)`` could use neither index, and read and sort
        every DONE item left in the organization for each chunk."""
        own = jobs.c.organization_id == organization_id
        found: list[Any] = list(
            self.session.execute(
                done_items_select()
                .where(own, items.c.job_id == after_job, items.c.position > after_position)
                .order_by(items.c.position)
                .limit(limit)
            ).all()
        )
        job = after_job
        while len(found) < limit:
            need = limit - len(found)
            upper = self._jobs_holding(organization_id, job, need)
            if upper is None:
                break
            found.extend(
                self.session.execute(
                    done_items_select()
                    .where(own, jobs.c.id > job, jobs.c.id <= upper)
                    .order_by(jobs.c.id, items.c.position)
                    .limit(need)
                ).all()
            )
            job = upper  # every item up to this job's last is read, or the chunk is full
        return [done_item_of(r) for r in found]

    def _jobs_holding(self, organization_id: int, after_job: int, need: int) -> int | None:
        """The last of the organization's next jobs after ``after_job`` (at most ``need``
        of them) that together hold ``need`` DONE items by their counters (None: no job
        is left): the bound of one read, which then sorts no more than it needs."""
        rows: Sequence[Any] = self.session.execute(
            select(jobs.c.id, jobs.c.items_done)
            .where(jobs.c.organization_id == organization_id, jobs.c.id > after_job)
            .order_by(jobs.c.id)
            .limit(need)
        ).all()
        held = 0
        for job_id, done in rows:
            held += int(done)
            if held >= need:
                return int(job_id)
        return int(rows[-1][0]) if rows else None

    def advance_impact(
        self, claim: ImpactClaim, progress: ImpactProgress, lease_seconds: float, finished: bool
    ) -> bool:
        """Write a chunk's counts and cursor and renew the lease, or (``finished``) end
        the dry run ``done``, while the grant is still this claim's; whether it was."""
        values: dict[str, Any] = {
            "after_job": progress.after_job,
            "after_position": progress.after_position,
            "counted_job": progress.counted_job,
            "lines": progress.lines,
            "jobs": progress.jobs,
            "checked": progress.checked,
            "total": progress.total,
            "lease_expires_at": None if finished else later(lease_seconds),
        }
        if finished:
            values.update(status=DONE, finished_at=db_now())
        row = self.session.execute(
            update(impacts).where(*_granted(claim)).values(values).returning(impacts.c.id)
        ).first()
        return row is not None

    def fail_impact(self, claim: ImpactClaim) -> bool:
        """End the dry run ``failed`` (its rules cannot be used) while it is this
        claim's; whether it was."""
        row = self.session.execute(
            update(impacts)
            .where(*_granted(claim))
            .values(status=FAILED, lease_expires_at=None, finished_at=db_now())
            .returning(impacts.c.id)
        ).first()
        return row is not None

    def release_impact(self, claim: ImpactClaim) -> None:
        """Give the lease back (after a slice of work, or a failure): it ends now, so the
        next claim takes the runs that waited longer first, then this one again."""
        self.session.execute(
            update(impacts).where(*_granted(claim)).values(lease_expires_at=db_now())
        )

    def delete_old_impacts(self, seconds: float) -> int:
        """Delete the dry runs asked more than ``seconds`` ago, whatever their status
        (a page that polls one that old has been left); how many."""
        deleted: Sequence[Any] = self.session.execute(
            delete(impacts).where(impacts.c.created_at < ago(seconds)).returning(impacts.c.id)
        ).all()
        return len(deleted)


def _granted(claim: ImpactClaim) -> tuple[ColumnElement[bool], ...]:
    """The dry run's row while it is still this claim's grant and running."""
    return (
        impacts.c.id == claim.id,
        impacts.c.lease_token == claim.token,
        impacts.c.status == RUNNING,
    )


def _claimable(impact: Any) -> ColumnElement[bool]:
    """A dry run that waits and no live lease holds."""
    free = or_(impact.c.lease_expires_at.is_(None), impact.c.lease_expires_at <= db_now())
    return and_(impact.c.status.in_((PENDING, RUNNING)), free)


def _state(row: Any) -> ImpactState:
    progress = ImpactProgress(
        int(row.after_job),
        int(row.after_position),
        int(row.counted_job),
        int(row.lines),
        int(row.jobs),
        int(row.checked),
        None if row.total is None else int(row.total),
    )
    return ImpactState(
        int(row.id),
        int(row.organization_id),
        row.rules,
        int(row.lexicon_version),
        str(row.status),
        progress,
    )
