"""The spending repository: the monthly ledger, budgets, per-run billing, shared audio.

Every compare-and-set is a named method that returns whether it won. The month's upsert
is the budget's only guard: its update is conditional on ``billed + n <= budget`` on the
ledger row itself, so concurrent runs in any number of processes serialize on that row
and can never overshoot. Each billed attempt is a reservation row, which a refund flips.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from sqlalchemy import Table, and_, func, insert, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement
from sqlalchemy.types import String

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import (
    Export,
    ItemStatus,
    Render,
    Take,
    UsageMonth,
)
from speechbatch.adapters.models import (
    Reservation as ReservationRow,
)
from speechbatch.adapters.repositories.tables import items, jobs, organizations

usage_months = cast(Table, UsageMonth.__table__)
exports = cast(Table, Export.__table__)
renders = cast(Table, Render.__table__)
reservations = cast(Table, ReservationRow.__table__)
takes = cast(Table, Take.__table__)

# Fingerprints per IN (...) list: well under every backend's bound-parameter limit.
_CHUNK = 500


class db_month(FunctionElement[str]):
    """The database's current calendar month in UTC, as ``YYYY-MM``."""

    type = String()
    inherit_cache = True


@compiles(db_month, "postgresql")
def _pg_month(element: db_month, compiler: SQLCompiler, **kw: Any) -> str:
    return "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM')"


@compiles(db_month, "sqlite")
def _sqlite_month(element: db_month, compiler: SQLCompiler, **kw: Any) -> str:
    return "strftime('%Y-%m', 'now')"


@dataclass(frozen=True)
class Usage:
    """An organization's ledger for one month, and its budget."""

    month: str
    billed_characters: int
    provider_calls: int
    budget_characters: int | None

    @property
    def remaining_characters(self) -> int | None:
        """What the budget still allows this month (None without a budget)."""
        if self.budget_characters is None:
            return None
        return max(0, self.budget_characters - self.billed_characters)


@dataclass(frozen=True)
class Reservation:
    """One provider attempt's characters, billed to ``month`` before it is sent."""

    id: int
    job_id: int
    characters: int
    month: str


def _chunks(values: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(values), _CHUNK):
        yield values[start : start + _CHUNK]


@dataclass(frozen=True)
class JobItems:
    """A job's voice and options (stored JSON) and its items' (id, status, text, stale)."""

    voice: str
    options: str
    rows: list[Any]


class Spending(Protocol):
    """What the services need of the ledger, budgets and stored audio."""

    def usage(self, organization_id: int) -> Usage: ...
    def set_budget(self, slug: str, characters: int | None) -> int | None: ...
    def job_items(self, job_id: int, organization_id: int) -> JobItems | None: ...
    def longest_unsent(
        self, job_id: int, organization_id: int, *, regenerate: bool
    ) -> int | None: ...
    def reusable_fingerprints(self, fingerprints: Iterable[str]) -> set[str]: ...
    def referenced_keys(self, keys: Iterable[str]) -> set[str]: ...


class SpendingRepository:
    """The ledger, budgets and shared-audio queries over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._dialect = session.get_bind().dialect.name

    def reserve_characters(
        self, organization_id: int, job_id: int, attempt: int, characters: int
    ) -> Reservation | None:
        """Compare-and-set: bill one provider attempt of ``characters`` to this month
        (its reservation's row is the run's share of the ledger) before it is sent; None, writing
        nothing, when it does not fit the budget.

        The month's row is one conditional upsert: the first call of a month inserts it (if
        it fits the budget at all), later ones add to it only while ``billed + n <=
        budget``; the guard is on the row being updated, which PostgreSQL re-checks on its
        newest version and SQLite writes under its one write lock. The reservation's row
        names the month that paid, as the upsert returned it. On PostgreSQL both are one
        statement (the upsert in a ``WITH``), so the month's row, which every start of
        every job of the organization needs, is held only for it and the commit; SQLite
        has no writes in a ``WITH``, and takes two.
        """
        bill = self._bill_month(organization_id, characters)
        columns = ["organization_id", "job_id", "attempt", "month", "characters"]
        if self._dialect == "postgresql":
            billed = bill.cte("billed")
            source = select(
                literal(organization_id), literal(job_id), literal(attempt),
                billed.c.month, literal(characters),
            )  # fmt: skip
            statement = (
                insert(reservations).from_select(columns, source).add_cte(billed, nest_here=True)
            )
        else:
            month = self.session.execute(bill).scalar_one_or_none()
            if month is None:
                return None
            values = (organization_id, job_id, attempt, month, characters)
            statement = insert(reservations).values(dict(zip(columns, values, strict=True)))
        row = self.session.execute(
            statement.returning(reservations.c.id, reservations.c.month)
        ).first()
        if row is None:
            return None
        return Reservation(int(row.id), job_id, characters, row.month)

    def _bill_month(self, organization_id: int, characters: int) -> Any:
        """The upsert that adds one call of ``characters`` to this month's row while it
        fits the budget, returning the month (no row: refused)."""
        budget = (
            select(organizations.c.budget_characters)
            .where(organizations.c.id == organization_id)
            .scalar_subquery()
        )
        insert_fn = postgresql.insert if self._dialect == "postgresql" else sqlite.insert
        source = select(
            literal(organization_id), db_month(), literal(characters), literal(1)
        ).where(or_(budget.is_(None), literal(characters) <= budget))
        upsert = insert_fn(usage_months).from_select(
            ["organization_id", "month", "billed_characters", "provider_calls"], source
        )
        return upsert.on_conflict_do_update(
            index_elements=[usage_months.c.organization_id, usage_months.c.month],
            set_={
                "billed_characters": usage_months.c.billed_characters
                + upsert.excluded.billed_characters,
                "provider_calls": usage_months.c.provider_calls + 1,
            },
            where=or_(
                budget.is_(None),
                usage_months.c.billed_characters + upsert.excluded.billed_characters <= budget,
            ),
        ).returning(usage_months.c.month)

    def refund_reservation(self, reservation: Reservation) -> bool:
        """Compare-and-set: give back a reserved attempt that was never sent, to the
        month that paid for it; whether it won (a second refund of it gives nothing)."""
        # The run history changes: the job's ETag must too. The job row first, as in an
        # item's start (its fence), so a refund and a start of the run take turns on it.
        self.session.execute(
            update(jobs).where(jobs.c.id == reservation.job_id).values(version=jobs.c.version + 1)
        )
        row = self.session.execute(
            update(reservations)
            .where(reservations.c.id == reservation.id, reservations.c.refunded_at.is_(None))
            .values(refunded_at=db_now())
            .returning(
                reservations.c.organization_id,
                reservations.c.attempt,
                reservations.c.month,
                reservations.c.characters,
            )
        ).first()
        if row is None:
            return False
        self.session.execute(
            update(usage_months)
            .where(
                usage_months.c.organization_id == row.organization_id,
                usage_months.c.month == row.month,
            )
            .values(
                billed_characters=usage_months.c.billed_characters - row.characters,
                provider_calls=usage_months.c.provider_calls - 1,
            )
        )
        return True

    def usage(self, organization_id: int) -> Usage:
        """This month's ledger of the organization (zeros before its first call)."""
        month = self.session.execute(select(db_month())).scalar_one()
        row = self.session.execute(
            select(
                organizations.c.budget_characters,
                usage_months.c.billed_characters,
                usage_months.c.provider_calls,
            )
            .select_from(
                organizations.outerjoin(
                    usage_months,
                    (usage_months.c.organization_id == organizations.c.id)
                    & (usage_months.c.month == month),
                )
            )
            .where(organizations.c.id == organization_id)
        ).one()
        return Usage(
            month=month,
            billed_characters=int(row.billed_characters or 0),
            provider_calls=int(row.provider_calls or 0),
            budget_characters=row.budget_characters,
        )

    def set_budget(self, slug: str, characters: int | None) -> int | None:
        """Set (or with None remove) an organization's monthly budget; its id, or None."""
        return self.session.execute(
            update(organizations)
            .where(organizations.c.slug == slug)
            .values(budget_characters=characters)
            .returning(organizations.c.id)
        ).scalar_one_or_none()

    def job_items(self, job_id: int, organization_id: int) -> JobItems | None:
        """A job's voice, options and its items' (id, status, text, stale), in order;
        None when not the org's."""
        job = self.session.execute(
            select(jobs.c.voice, jobs.c.options).where(
                jobs.c.id == job_id, jobs.c.organization_id == organization_id
            )
        ).first()
        if job is None:
            return None
        rows = self.session.execute(
            select(items.c.id, items.c.status, items.c.text, items.c.stale)
            .where(items.c.job_id == job_id)
            .order_by(items.c.position)
        ).all()
        return JobItems(job.voice, job.options, list(rows))

    def longest_unsent(self, job_id: int, organization_id: int, *, regenerate: bool) -> int | None:
        """The characters of the job's longest text still to send (not DONE; every item
        for a regenerate), counted by the database: 0 when none is left, None when the
        job is not the organization's. No call of a click can need more."""
        unsent = items.c.job_id == jobs.c.id
        if not regenerate:
            unsent = and_(unsent, items.c.status != ItemStatus.DONE)
        longest = select(func.max(func.length(items.c.text))).where(unsent).scalar_subquery()
        row = self.session.execute(
            select(func.coalesce(longest, 0)).where(
                jobs.c.id == job_id, jobs.c.organization_id == organization_id
            )
        ).first()
        return None if row is None else int(row[0])

    def reusable_fingerprints(self, fingerprints: Iterable[str]) -> set[str]:
        """Which of these fingerprints already have finished audio (an index probe each)."""
        wanted = sorted(set(fingerprints))
        found: set[str] = set()
        for chunk in _chunks(wanted):
            found.update(
                self.session.execute(
                    select(items.c.fingerprint)
                    .where(
                        items.c.fingerprint.in_(chunk),
                        items.c.status == ItemStatus.DONE,
                        items.c.audio_path.is_not(None),
                    )
                    .distinct()
                ).scalars()
            )
        return found

    def referenced_keys(self, keys: Iterable[str]) -> set[str]:
        """Which of these storage keys an item's audio, a kept take, an export's archive or
        a render's files refer to."""
        wanted = sorted(set(keys))
        found: set[str] = set()
        for chunk in _chunks(wanted):
            found.update(
                self.session.execute(
                    select(items.c.audio_path).where(items.c.audio_path.in_(chunk)).distinct()
                ).scalars()
            )
            found.update(
                self.session.execute(
                    select(exports.c.file_path).where(exports.c.file_path.in_(chunk))
                ).scalars()
            )
            for column in (renders.c.file_path, renders.c.vtt_path, renders.c.srt_path):
                found.update(
                    self.session.execute(select(column).where(column.in_(chunk))).scalars()
                )
            found.update(
                self.session.execute(
                    select(takes.c.audio_path).where(takes.c.audio_path.in_(chunk)).distinct()
                ).scalars()
            )
        return found

    def is_referenced(self, key: str) -> bool:
        """Whether any item or kept take still refers to a stored audio file."""
        return bool(self.referenced_keys([key]))
