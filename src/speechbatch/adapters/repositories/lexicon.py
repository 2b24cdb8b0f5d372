"""The pronunciation lexicon: an organization's rules and their version (the stale
pass's rows are in ``stale_marks.py``).

A PUT replaces the rules and increments ``lexicons.version`` in one transaction; the
stale pass that follows writes every job's spoken texts and stale marks for it.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from sqlalchemy import (
    ColumnElement,
    Table,
    delete,
    func,
    insert,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import LexiconRule
from speechbatch.adapters.repositories.stale_marks import (
    DoneItem,
    PassClaim,
    PassState,
    SpokenRow,
    StaleMarks,
    lexicons,
)
from speechbatch.domain.lexicon import Rule

__all__ = ["DoneItem", "LexiconRepository", "Lexicons", "PassClaim", "PassState", "SpokenRow"]

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
    def due_jobs(self, organization_id: int, version: int) -> list[int]: ...
    def lock_items_to_judge(
        self, job_id: int, version: int, after: int, limit: int
    ) -> list[DoneItem]: ...
    def record_spoken(self, job_id: int, version: int, rows: Sequence[SpokenRow]) -> None: ...
    def finish_job(self, job_id: int, version: int) -> bool: ...
    def done_item(self, job_id: int, item_id: int) -> DoneItem | None: ...
    def set_stale(self, job_id: int, stale: Sequence[int], fresh: Sequence[int]) -> None: ...
    def done_items(self, organization_id: int) -> Generator[DoneItem, None, None]: ...


class LexiconRepository(StaleMarks):
    """The lexicon's rows, over one session: its rules here, the stale pass's in
    ``StaleMarks``."""

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
