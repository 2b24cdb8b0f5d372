"""The stale pass's rows: which organizations' spoken texts and stale marks are due, the
pass's lease, and each job's items judged in chunks.

A job whose ``spoken_version`` is not its organization's lexicon version (a change of the
rules, a new job, an edited line) makes a pass due. The pass is claimed by
compare-and-set under a lease on the ``lexicons`` row (any process's background tick)
and walks those jobs one at a time: each chunk is one short transaction that first takes
the job row's lock (``FOR SHARE``), as every writer of items does, so an edit or a run's
finish of that job is either wholly before the chunk's read or wholly after its write.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, and_, bindparam, exists, or_, select, update
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now, later
from speechbatch.adapters.models import ItemStatus, Lexicon
from speechbatch.adapters.repositories.tables import item_voice, items, jobs
from speechbatch.adapters.repositories.takes import takes

lexicons = cast(Table, Lexicon.__table__)


@dataclass(frozen=True)
class PassState:
    """Where an organization's lexicon stands: its version, whether a stale pass is due
    (some job's spoken texts and marks answer another version), and whether a pass holds
    a live lease now."""

    version: int
    due: bool
    leased: bool


@dataclass(frozen=True)
class PassClaim:
    """A stale pass this process won: the organization, its grant and the version."""

    organization_id: int
    token: int
    version: int


@dataclass(frozen=True)
class DoneItem:
    """An item and its current take: what the stale predicate compares."""

    id: int
    job_id: int
    position: int
    text: str
    stale: bool
    # None: no take to compare (not DONE, or its take row is gone, which none should be).
    take_spoken_text: str | None
    # The take answered another text, voice or options than the job has now.
    other_reason: bool


@dataclass(frozen=True)
class SpokenRow:
    """What the stale pass writes of one item: its spoken text under a version (None:
    the text itself), or why there is none (``error``), and its stale mark."""

    id: int
    spoken_text: str | None
    error: str | None
    stale: bool
    # Its stale mark before: a line spoken as written whose mark stays is written in bulk.
    was_stale: bool


class StaleMarks:
    """The stale pass's rows, over one session (the lexicon repository's second half)."""

    session: Session

    def state(self, organization_id: int) -> PassState:
        """The version, whether a stale pass is due, whether a pass is leased."""
        row = self.session.execute(
            select(
                lexicons.c.version,
                _some_job_due(lexicons).label("due"),
                (lexicons.c.pass_expires_at > db_now()).label("leased"),
            ).where(lexicons.c.organization_id == organization_id)
        ).first()
        if row is None:
            return PassState(0, False, False)
        return PassState(int(row.version), bool(row.due), bool(row.leased))

    def pass_due(self) -> bool:
        """Whether some organization's stale pass is due and not leased (a read: a tick
        that finds none takes no write lock)."""
        due = self.session.execute(
            select(lexicons.c.organization_id).where(_claimable(lexicons)).limit(1)
        ).first()
        return due is not None

    def claim_stale_pass(self, lease_seconds: float) -> PassClaim | None:
        """Claim a due stale pass (an organization with a job whose spoken texts answer
        another version, and no live lease) for ``lease_seconds``; None when there is
        none to win. The one whose lease ended longest ago (or never held one) goes
        first: a pass that gave its turn back after a slice waits behind the others."""
        candidate = lexicons.alias("candidate")
        first_due = (
            select(candidate.c.organization_id)
            .where(_claimable(candidate))
            .order_by(candidate.c.pass_expires_at.nulls_first(), candidate.c.organization_id)
            .limit(1)
            .scalar_subquery()
        )
        row = self.session.execute(
            update(lexicons)
            .where(lexicons.c.organization_id == first_due, _claimable(lexicons))
            .values(pass_token=lexicons.c.pass_token + 1, pass_expires_at=later(lease_seconds))
            .returning(lexicons.c.organization_id, lexicons.c.pass_token, lexicons.c.version)
        ).first()
        return None if row is None else PassClaim(int(row[0]), int(row[1]), int(row[2]))

    def renew_pass(self, claim: PassClaim, lease_seconds: float) -> bool:
        """Extend the pass's lease while it is still this grant's; whether it is."""
        row = self.session.execute(
            update(lexicons)
            .where(*_granted(claim))
            .values(pass_expires_at=later(lease_seconds))
            .returning(lexicons.c.organization_id)
        ).first()
        return row is not None

    def finish_pass(self, claim: PassClaim) -> bool:
        """Release the lease of a pass that went through every due job, recording the
        version it used; a job left behind (a PUT or an edit in between) keeps a pass
        due. Whether the grant was still this one's."""
        row = self.session.execute(
            update(lexicons)
            .where(*_granted(claim))
            .values(stale_version=claim.version, pass_expires_at=None)
            .returning(lexicons.c.organization_id)
        ).first()
        return row is not None

    def release_pass(self, claim: PassClaim) -> None:
        """Give a pass's lease back (while it is still this grant's): after a slice of
        work, or a failure. It ends now, so the next claim takes the organizations that
        waited longer first, then this one again."""
        self.session.execute(
            update(lexicons).where(*_granted(claim)).values(pass_expires_at=db_now())
        )

    def due_jobs(self, organization_id: int, version: int) -> list[int]:
        """The organization's jobs whose spoken texts and marks do not all answer
        ``version``, in order (a job made after this read is due again next time)."""
        ids: Sequence[int] = (
            self.session.execute(
                select(jobs.c.id)
                .where(
                    jobs.c.organization_id == organization_id,
                    jobs.c.spoken_version.is_distinct_from(version),
                )
                .order_by(jobs.c.id)
            )
            .scalars()
            .all()
        )
        return [int(job_id) for job_id in ids]

    def lock_items_to_judge(
        self, job_id: int, version: int, after: int, limit: int
    ) -> list[DoneItem]:
        """Lock the job row (shared: writers of its items wait), then read up to
        ``limit`` of its items whose spoken text does not answer ``version``, positions
        after ``after``, with their current takes (in position order: a range of the
        (job, position) index, however big the job). Every row read is returned."""
        self.session.execute(
            select(jobs.c.id).where(jobs.c.id == job_id).with_for_update(read=True)
        )
        rows = self.session.execute(
            _with_takes()
            .where(
                items.c.job_id == job_id,
                items.c.position > after,
                items.c.spoken_version.is_distinct_from(version),
            )
            .order_by(items.c.position)
            .limit(limit)
        ).all()
        return [done_item_of(r) for r in rows]

    def record_spoken(self, job_id: int, version: int, rows: Sequence[SpokenRow]) -> None:
        """Write items' spoken texts under ``version`` and their stale marks (items of
        the locked job), and bump the job's version so its pages and ETags change. Lines
        spoken as written whose mark stays (most) take one statement per thousand."""
        plain = [r.id for r in rows if r.spoken_text is r.error is None and r.stale == r.was_stale]
        for start in range(0, len(plain), 1000):
            self.session.execute(
                update(items)
                .where(items.c.job_id == job_id, items.c.id.in_(plain[start : start + 1000]))
                .values(spoken_version=version, spoken_text=None, spoken_error=None)
            )
        written = set(plain)
        others = [r for r in rows if r.id not in written]
        if others:
            self.session.execute(
                update(items)
                .where(items.c.id == bindparam("item_id"), items.c.job_id == job_id)
                .values(
                    spoken_version=version,
                    spoken_text=bindparam("spoken"),
                    spoken_error=bindparam("error"),
                    stale=bindparam("marked"),
                ),
                [
                    {"item_id": r.id, "spoken": r.spoken_text, "error": r.error,
                     "marked": r.stale}
                    for r in others
                ],
            )  # fmt: skip
        if rows:
            self.session.execute(
                update(jobs).where(jobs.c.id == job_id).values(version=jobs.c.version + 1)
            )

    def finish_job(self, job_id: int, version: int) -> bool:
        """Record that every item of the job answers ``version`` (while they all do: an
        edit in between leaves the job due); whether it did."""
        behind = (
            select(items.c.id)
            .where(items.c.job_id == job_id, items.c.spoken_version.is_distinct_from(version))
            .exists()
        )
        row = self.session.execute(
            update(jobs)
            .where(jobs.c.id == job_id, ~behind)
            .values(spoken_version=version)
            .returning(jobs.c.id)
        ).first()
        return row is not None

    def done_item(self, job_id: int, item_id: int) -> DoneItem | None:
        """One DONE item of the job, read as the stale pass reads them (None: not DONE
        with a current take): a restore judges it by the pass's own predicate."""
        row = self.session.execute(
            _with_takes().where(
                items.c.job_id == job_id,
                items.c.id == item_id,
                items.c.status == ItemStatus.DONE,
            )
        ).first()
        return None if row is None or row.spoken_text is None else done_item_of(row)

    def set_stale(self, job_id: int, stale: Sequence[int], fresh: Sequence[int]) -> None:
        """Mark ``stale`` items stale and ``fresh`` ones not (items of the locked job),
        and bump the job's version so its pages and ETags change."""
        for flag, ids in ((True, stale), (False, fresh)):
            for start in range(0, len(ids), 1000):
                self.session.execute(
                    update(items)
                    .where(items.c.job_id == job_id, items.c.id.in_(ids[start : start + 1000]))
                    .values(stale=flag)
                )
        if stale or fresh:
            self.session.execute(
                update(jobs).where(jobs.c.id == job_id).values(version=jobs.c.version + 1)
            )

    def done_items(self, organization_id: int) -> Generator[DoneItem, None, None]:
        """Every DONE item of the organization with a current take, streamed in one read
        (a direct recomputation to check the background passes against; the dry runs
        read them in chunks, ``impacts.py``); a caller that stops early closes the
        iterator, which closes the stream's cursor."""
        result = self.session.execute(
            done_items_select().where(jobs.c.organization_id == organization_id),
            execution_options={"yield_per": 5000},
        )
        try:
            for row in result:
                yield done_item_of(row)
        finally:
            result.close()


def _granted(claim: PassClaim) -> tuple[ColumnElement[bool], ...]:
    """The pass's lease row while it is still this grant's."""
    return (
        lexicons.c.organization_id == claim.organization_id,
        lexicons.c.pass_token == claim.token,
    )


def _some_job_due(lexicon: Any) -> ColumnElement[bool]:
    """Whether a job of ``lexicon``'s organization has spoken texts of another version."""
    return (
        select(jobs.c.id)
        .where(
            jobs.c.organization_id == lexicon.c.organization_id,
            jobs.c.spoken_version.is_distinct_from(lexicon.c.version),
        )
        .exists()
    )


def _claimable(lexicon: Any) -> ColumnElement[bool]:
    """A due pass that no live lease holds."""
    free = or_(lexicon.c.pass_expires_at.is_(None), lexicon.c.pass_expires_at <= db_now())
    return and_(free, _some_job_due(lexicon))


_CURRENT_TAKE = (takes.c.item_id == items.c.id, takes.c.take == items.c.current_take)
_OTHER_REASON = or_(
    takes.c.text != items.c.text,
    takes.c.voice != item_voice(),
    takes.c.options != jobs.c.options,
)
_COLUMNS = (items.c.id, items.c.job_id, items.c.position, items.c.text, items.c.stale)


def _with_takes() -> Any:
    """Items with their current take's spoken text (None: no take, or not DONE) and
    whether the take answered another text, voice or options than the job has now;
    the take looked up per item (two index probes), as a chunk of one job wants."""
    done = and_(*_CURRENT_TAKE, items.c.status == ItemStatus.DONE)
    spoken = select(takes.c.spoken_text).where(done).scalar_subquery()
    other = exists().where(done, _OTHER_REASON)
    return (
        select(*_COLUMNS, spoken.label("spoken_text"), other.label("other_reason"))
        .select_from(items)
        .join(jobs, jobs.c.id == items.c.job_id)
    )


def done_items_select() -> Any:
    """DONE items with their current take (one join, as a scan of a whole organization
    wants: its one read, or the dry runs' chunks) and whether the take answered another
    text, voice or options."""
    return (
        select(*_COLUMNS, takes.c.spoken_text, _OTHER_REASON.label("other_reason"))
        .select_from(items)
        .join(jobs, jobs.c.id == items.c.job_id)
        .join(takes, and_(*_CURRENT_TAKE))
        .where(items.c.status == ItemStatus.DONE)
    )


def done_item_of(row: Any) -> DoneItem:
    """A row of ``done_items_select`` (or ``_with_takes``) as the stale predicate reads it."""
    return DoneItem(
        int(row.id),
        int(row.job_id),
        int(row.position),
        row.text,
        bool(row.stale),
        row.spoken_text,
        bool(row.other_reason),
    )
