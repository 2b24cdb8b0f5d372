"""The pronunciation lexicon: an organization's rules, their version, and the stale pass.

A PUT replaces the rules and increments ``lexicons.version`` in one transaction. The
stale pass that follows is claimed by compare-and-set under a lease (any process's
background tick) and walks the organization's DONE items one job at a time: each chunk
is one short transaction that first takes the job row's lock (``FOR SHARE``), as every
writer of items does, so an edit or a run's finish of that job is either wholly before
the chunk's read or wholly after its write.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now, later
from speechbatch.adapters.models import ItemStatus, Lexicon, LexiconRule
from speechbatch.adapters.repositories.tables import items, jobs
from speechbatch.adapters.repositories.takes import takes
from speechbatch.domain.lexicon import Rule

lexicons = cast(Table, Lexicon.__table__)
lexicon_rules = cast(Table, LexiconRule.__table__)


def lexicon_version_of(organization_id: Any) -> ColumnElement[int]:
    """The organization's lexicon version now (0 before its first rules), as a column."""
    version = (
        select(lexicons.c.version)
        .where(lexicons.c.organization_id == organization_id)
        .scalar_subquery()
    )
    return func.coalesce(version, 0)


@dataclass(frozen=True)
class LexiconStamp:
    """A version of an organization's rules and when it was saved (None: never)."""

    version: int
    saved_at: Any


@dataclass(frozen=True)
class PassState:
    """Where an organization's lexicon stands: its version, the version its last stale
    pass marked, and whether a pass holds a live lease now."""

    version: int
    stale_version: int
    leased: bool


@dataclass(frozen=True)
class PassClaim:
    """A stale pass this process won: the organization, its grant and the version."""

    organization_id: int
    token: int
    version: int


@dataclass(frozen=True)
class DoneItem:
    """A DONE item with a current take: what the stale predicate compares."""

    id: int
    job_id: int
    position: int
    text: str
    stale: bool
    take_spoken_text: str
    # The take answered another text, voice or options than the job has now.
    other_reason: bool


class Lexicons(Protocol):
    """What the lexicon services need."""

    def rules(self, organization_id: int) -> tuple[LexiconStamp, list[Rule]]: ...
    def stamp(self, organization_id: int) -> LexiconStamp: ...
    def state(self, organization_id: int) -> PassState: ...
    def replace_rules(self, organization_id: int, rules: Sequence[Rule]) -> int: ...
    def pass_due(self) -> bool: ...
    def claim_stale_pass(self, lease_seconds: float) -> PassClaim | None: ...
    def renew_pass(self, claim: PassClaim, lease_seconds: float) -> bool: ...
    def finish_pass(self, claim: PassClaim) -> bool: ...
    def release_pass(self, claim: PassClaim) -> None: ...
    def job_ids(self, organization_id: int) -> list[int]: ...
    def lock_done_items(self, job_id: int, after: int, limit: int) -> list[DoneItem]: ...
    def done_item(self, job_id: int, item_id: int) -> DoneItem | None: ...
    def set_stale(self, job_id: int, stale: Sequence[int], fresh: Sequence[int]) -> None: ...
    def done_items(self, organization_id: int) -> Generator[DoneItem, None, None]: ...


class LexiconRepository:
    """The lexicon's rows, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def rules(self, organization_id: int) -> tuple[LexiconStamp, list[Rule]]:
        """The organization's rules in order, with the stamp of that version, read in
        one statement (a PUT in between cannot pair one version with another's rules)."""
        rows = self.session.execute(
            select(
                lexicons.c.version,
                lexicons.c.updated_at,
                lexicon_rules.c.match,
                lexicon_rules.c.say,
                lexicon_rules.c.regex,
                lexicon_rules.c.case_sensitive,
            )
            .select_from(lexicons)
            .outerjoin(lexicon_rules, lexicon_rules.c.organization_id == lexicons.c.organization_id)
            .where(lexicons.c.organization_id == organization_id)
            .order_by(lexicon_rules.c.position)
        ).all()
        if not rows:
            return LexiconStamp(0, None), []
        stamp = LexiconStamp(int(rows[0].version), rows[0].updated_at)
        rules = [
            Rule(r.match, r.say, bool(r.regex), bool(r.case_sensitive))
            for r in rows
            if r.match is not None
        ]
        return stamp, rules

    def stamp(self, organization_id: int) -> LexiconStamp:
        """The organization's lexicon version and when it was saved (a cache's key:
        a database restored or replaced under a process never reuses stale rules)."""
        row = self.session.execute(
            select(lexicons.c.version, lexicons.c.updated_at).where(
                lexicons.c.organization_id == organization_id
            )
        ).first()
        return LexiconStamp(0, None) if row is None else LexiconStamp(int(row[0]), row[1])

    def state(self, organization_id: int) -> PassState:
        """The version, the version the stale marks answer, whether a pass is leased."""
        row = self.session.execute(
            select(
                lexicons.c.version,
                lexicons.c.stale_version,
                (lexicons.c.pass_expires_at > db_now()).label("leased"),
            ).where(lexicons.c.organization_id == organization_id)
        ).first()
        if row is None:
            return PassState(0, 0, False)
        return PassState(int(row.version), int(row.stale_version), bool(row.leased))

    def replace_rules(self, organization_id: int, rules: Sequence[Rule]) -> int:
        """Replace the organization's rules and increment its version (the row's lock
        is held until commit, so two PUTs take turns); answers the new version."""
        dialect = self.session.get_bind().dialect.name
        insert_fn = postgresql.insert if dialect == "postgresql" else sqlite.insert
        upsert = insert_fn(lexicons).values(organization_id=organization_id, version=1)
        version: int = self.session.execute(
            upsert.on_conflict_do_update(
                index_elements=[lexicons.c.organization_id],
                set_={"version": lexicons.c.version + 1, "updated_at": db_now()},
            ).returning(lexicons.c.version)
        ).scalar_one()
        self.session.execute(
            delete(lexicon_rules).where(lexicon_rules.c.organization_id == organization_id)
        )
        if rules:
            self.session.execute(
                insert(lexicon_rules),
                [
                    {
                        "organization_id": organization_id,
                        "position": n,
                        "match": r.match,
                        "say": r.say,
                        "regex": r.regex,
                        "case_sensitive": r.case_sensitive,
                    }
                    for n, r in enumerate(rules)
                ],
            )
        return int(version)

    def pass_due(self) -> bool:
        """Whether some organization's stale pass is due (a read: a tick that finds
        none takes no write lock)."""
        due = self.session.execute(
            select(lexicons.c.organization_id)
            .where(
                lexicons.c.stale_version < lexicons.c.version,
                or_(lexicons.c.pass_expires_at.is_(None), lexicons.c.pass_expires_at <= db_now()),
            )
            .limit(1)
        ).first()
        return due is not None

    def claim_stale_pass(self, lease_seconds: float) -> PassClaim | None:
        """Claim a due stale pass (an organization whose marks answer an older version,
        with no live lease) for ``lease_seconds``; None when there is none to win."""
        due = and_(
            lexicons.c.stale_version < lexicons.c.version,
            or_(lexicons.c.pass_expires_at.is_(None), lexicons.c.pass_expires_at <= db_now()),
        )
        candidate = lexicons.alias("candidate")
        first_due = (
            select(candidate.c.organization_id)
            .where(
                candidate.c.stale_version < candidate.c.version,
                or_(
                    candidate.c.pass_expires_at.is_(None),
                    candidate.c.pass_expires_at <= db_now(),
                ),
            )
            .order_by(candidate.c.organization_id)
            .limit(1)
            .scalar_subquery()
        )
        row = self.session.execute(
            update(lexicons)
            .where(lexicons.c.organization_id == first_due, due)
            .values(pass_token=lexicons.c.pass_token + 1, pass_expires_at=later(lease_seconds))
            .returning(lexicons.c.organization_id, lexicons.c.pass_token, lexicons.c.version)
        ).first()
        return None if row is None else PassClaim(int(row[0]), int(row[1]), int(row[2]))

    def renew_pass(self, claim: PassClaim, lease_seconds: float) -> bool:
        """Extend the pass's lease while it is still this grant's; whether it is."""
        row = self.session.execute(
            update(lexicons)
            .where(
                lexicons.c.organization_id == claim.organization_id,
                lexicons.c.pass_token == claim.token,
            )
            .values(pass_expires_at=later(lease_seconds))
            .returning(lexicons.c.organization_id)
        ).first()
        return row is not None

    def finish_pass(self, claim: PassClaim) -> bool:
        """Record that the marks answer the claimed version and release the lease; a PUT
        in between left a newer version, whose pass is then due. Whether it won."""
        row = self.session.execute(
            update(lexicons)
            .where(
                lexicons.c.organization_id == claim.organization_id,
                lexicons.c.pass_token == claim.token,
            )
            .values(stale_version=claim.version, pass_expires_at=None)
            .returning(lexicons.c.organization_id)
        ).first()
        return row is not None

    def release_pass(self, claim: PassClaim) -> None:
        """Give a failed pass's lease back (while it is still this grant's), so that the
        next nudge or tick does it again at once instead of after the lease."""
        self.session.execute(
            update(lexicons)
            .where(
                lexicons.c.organization_id == claim.organization_id,
                lexicons.c.pass_token == claim.token,
            )
            .values(pass_expires_at=None)
        )

    def job_ids(self, organization_id: int) -> list[int]:
        """The organization's job ids, in order (a pass walks them; a job made after
        it began is sent with the new rules already)."""
        ids: Sequence[int] = (
            self.session.execute(
                select(jobs.c.id)
                .where(jobs.c.organization_id == organization_id)
                .order_by(jobs.c.id)
            )
            .scalars()
            .all()
        )
        return [int(job_id) for job_id in ids]

    def lock_done_items(self, job_id: int, after: int, limit: int) -> list[DoneItem]:
        """Lock the job row (shared: writers of its items wait), then read up to
        ``limit`` of its DONE items with a current take, positions after ``after`` (in
        position order: a range of the (job, position) index, however big the job)."""
        self.session.execute(
            select(jobs.c.id).where(jobs.c.id == job_id).with_for_update(read=True)
        )
        rows = self.session.execute(
            _done_items(probe=True).where(items.c.job_id == job_id, items.c.position > after)
            .order_by(items.c.position)
            .limit(limit)
        ).all()  # fmt: skip
        # An item whose take row is gone (none should be) is left as it is.
        return [_done_item(r) for r in rows if r.spoken_text is not None]

    def done_item(self, job_id: int, item_id: int) -> DoneItem | None:
        """One DONE item of the job, read as the stale pass reads them (None: not DONE
        with a current take): a restore judges it by the pass's own predicate."""
        row = self.session.execute(
            _done_items(probe=True).where(items.c.job_id == job_id, items.c.id == item_id)
        ).first()
        return None if row is None or row.spoken_text is None else _done_item(row)

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
        """Every DONE item of the organization with a current take, streamed (a dry
        run's count reads them in a reader); a caller that stops early closes the
        iterator, which closes the stream's cursor."""
        result = self.session.execute(
            _done_items().where(jobs.c.organization_id == organization_id),
            execution_options={"yield_per": 5000},
        )
        try:
            for row in result:
                yield _done_item(row)
        finally:
            result.close()


_CURRENT_TAKE = (takes.c.item_id == items.c.id, takes.c.take == items.c.current_take)
_OTHER_REASON = or_(
    takes.c.text != items.c.text,
    takes.c.voice != jobs.c.voice,
    takes.c.options != jobs.c.options,
)


def _done_items(*, probe: bool = False) -> Any:
    """DONE items with their current take's spoken text and whether the take answered
    another text, voice or options than the job has now. ``probe``: the take is looked
    up per item (two index probes), which a chunk of one job wants; without, one join,
    which a scan of a whole organization wants."""
    columns = (items.c.id, items.c.job_id, items.c.position, items.c.text, items.c.stale)
    if probe:
        spoken = select(takes.c.spoken_text).where(*_CURRENT_TAKE).scalar_subquery()
        other = exists().where(*_CURRENT_TAKE, _OTHER_REASON)
        return (
            select(*columns, spoken.label("spoken_text"), other.label("other_reason"))
            .select_from(items)
            .join(jobs, jobs.c.id == items.c.job_id)
            .where(items.c.status == ItemStatus.DONE, items.c.current_take.is_not(None))
        )
    return (
        select(*columns, takes.c.spoken_text, _OTHER_REASON.label("other_reason"))
        .select_from(items)
        .join(jobs, jobs.c.id == items.c.job_id)
        .join(takes, and_(*_CURRENT_TAKE))
        .where(items.c.status == ItemStatus.DONE)
    )


def _done_item(row: Any) -> DoneItem:
    return DoneItem(
        int(row.id),
        int(row.job_id),
        int(row.position),
        row.text,
        bool(row.stale),
        row.spoken_text,
        bool(row.other_reason),
    )
