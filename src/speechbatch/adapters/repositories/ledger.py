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

from sqlalchemy import Table, func, insert, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement
from sqlalchemy.types import String

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import (
    Export,
    Render,
    Take,
    UsageMonth,
)
from speechbatch.adapters.models import (
    Reservation as ReservationRow,
)
from speechbatch.adapters.repositories.spending_reads import JobItems, SpendingReads
from speechbatch.adapters.repositories.tables import jobs, organizations

usage_months = cast(Table, UsageMonth.__table__)
exports = cast(Table, Export.__table__)
renders = cast(Table, Render.__table__)
reservations = cast(Table, ReservationRow.__table__)
takes = cast(Table, Take.__table__)


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
class ProviderUsage:
    """One provider's share of an organization's month: billed units and calls."""

    provider: str | None
    billed: int
    calls: int


@dataclass(frozen=True)
class Usage:
    """An organization's ledger for one month, and its budget."""

    month: str
    billed_characters: int
    provider_calls: int
    budget_characters: int | None
    # Of the billed calls, those whose request was written but whose answer was lost.
    in_doubt_calls: int = 0
    in_doubt_characters: int = 0

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


class Spending(Protocol):
    """What the services need of the ledger, budgets and stored audio."""

    def usage(self, organization_id: int) -> Usage: ...
    def usage_by_provider(self, organization_id: int) -> list[ProviderUsage]: ...
    def set_budget(self, slug: str, characters: int | None) -> int | None: ...
    def job_items(self, job_id: int, organization_id: int) -> JobItems | None: ...
    def job_stamp(self, job_id: int, organization_id: int) -> tuple[int, Any] | None: ...
    def longest_unsent(
        self, job_id: int, organization_id: int, *, regenerate: bool
    ) -> int | None: ...
    def reusable_fingerprints(self, fingerprints: Iterable[str]) -> set[str]: ...
    def referenced_keys(self, keys: Iterable[str]) -> set[str]: ...


class SpendingRepository(SpendingReads):
    """The ledger, budgets and shared-audio queries over one session."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self._dialect = session.get_bind().dialect.name

    def reserve_characters(
        self,
        organization_id: int,
        job_id: int,
        attempt: int,
        characters: int,
        provider: str | None = None,
    ) -> Reservation | None:
        """Compare-and-set: bill one provider attempt of ``characters`` to this month
        (its reservation's row is the run's share of the ledger) before it is sent; None, writing
        nothing, when it does not fit the budget. ``provider``: where the attempt goes
        (the ledger's breakdown by provider).

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
        columns = ["organization_id", "job_id", "attempt", "month", "characters", "provider"]
        if self._dialect == "postgresql":
            billed = bill.cte("billed")
            source = select(
                literal(organization_id), literal(job_id), literal(attempt),
                billed.c.month, literal(characters), literal(provider, String()),
            )  # fmt: skip
            statement = (
                insert(reservations).from_select(columns, source).add_cte(billed, nest_here=True)
            )
        else:
            month = self.session.execute(bill).scalar_one_or_none()
            if month is None:
                return None
            values = (organization_id, job_id, attempt, month, characters, provider)
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

    def reservation_made(self, reservation: Reservation) -> bool:
        """Whether ``reservation``'s row exists: the transaction that made it committed
        (read after a commit whose acknowledgement was lost). PostgreSQL never hands an
        id out twice; SQLite may reuse a rolled-back row's id, so the run and the size
        must match too."""
        found = self.session.execute(
            select(reservations.c.id).where(
                reservations.c.id == reservation.id,
                reservations.c.job_id == reservation.job_id,
                reservations.c.characters == reservation.characters,
            )
        ).first()
        return found is not None

    def refund_reservation(self, reservation: Reservation) -> bool:
        """Compare-and-set: give back a reserved attempt that was never sent, to the
        month that paid for it; whether it won (a second refund of it gives nothing)."""
        # The run history changes: the job's ETag must too. The job row first, as in an
        # item's start (its fence), so a refund and a start of the run take turns on it.
        self.session.execute(
            update(jobs).where(jobs.c.id == reservation.job_id).values(version=jobs.c.version + 1)
        )
        row = self._flip(reservation, reservations.c.refunded_at)
        if row is None:
            return False
        self._add_to_month(
            row,
            billed_characters=usage_months.c.billed_characters - row.characters,
            provider_calls=usage_months.c.provider_calls - 1,
        )
        return True

    def mark_in_doubt(self, reservation: Reservation) -> bool:
        """Compare-and-set: count a billed attempt whose request was written but whose
        answer was lost (a timeout, a reset) as in doubt, in the month that paid; whether
        it won (a retried mark counts nothing more; a refunded one is not in doubt)."""
        row = self._flip(reservation, reservations.c.in_doubt_at)
        if row is None:
            return False
        self._add_to_month(
            row,
            in_doubt_calls=usage_months.c.in_doubt_calls + 1,
            in_doubt_characters=usage_months.c.in_doubt_characters + row.characters,
        )
        return True

    def _flip(self, reservation: Reservation, moment: Any) -> Any:
        """Set the reservation's ``moment`` column (refunded, in doubt) to now, once, and
        only while it is not refunded; its row (organization, month, characters), or None."""
        return self.session.execute(
            update(reservations)
            .where(
                reservations.c.id == reservation.id,
                moment.is_(None),
                reservations.c.refunded_at.is_(None),
            )
            .values({moment: db_now()})
            .returning(
                reservations.c.organization_id, reservations.c.month, reservations.c.characters
            )
        ).first()

    def _add_to_month(self, row: Any, **values: Any) -> None:
        """Update the usage month that paid for a reservation's ``row``."""
        self.session.execute(
            update(usage_months)
            .where(
                usage_months.c.organization_id == row.organization_id,
                usage_months.c.month == row.month,
            )
            .values(**values)
        )

    def usage_by_provider(self, organization_id: int) -> list[ProviderUsage]:
        """This month's billed units and calls per provider (see ``usage_by_provider``)."""
        return usage_by_provider(self.session, organization_id)

    def usage(self, organization_id: int) -> Usage:
        """This month's ledger of the organization (zeros before its first call)."""
        month = self.session.execute(select(db_month())).scalar_one()
        row = self.session.execute(
            select(
                organizations.c.budget_characters,
                usage_months.c.billed_characters,
                usage_months.c.provider_calls,
                usage_months.c.in_doubt_calls,
                usage_months.c.in_doubt_characters,
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
            in_doubt_calls=int(row.in_doubt_calls or 0),
            in_doubt_characters=int(row.in_doubt_characters or 0),
        )

    def set_budget(self, slug: str, characters: int | None) -> int | None:
        """Set (or with None remove) an organization's monthly budget; its id, or None."""
        return self.session.execute(
            update(organizations)
            .where(organizations.c.slug == slug)
            .values(budget_characters=characters)
            .returning(organizations.c.id)
        ).scalar_one_or_none()


def usage_by_provider(session: Session, organization_id: int) -> list[ProviderUsage]:
    """This month's billed units and calls of the organization per provider (from the
    reservations not refunded; NULL: rows from before several providers)."""
    month = session.execute(select(db_month())).scalar_one()
    rows = session.execute(
        select(reservations.c.provider, func.sum(reservations.c.characters), func.count())
        .where(
            reservations.c.organization_id == organization_id,
            reservations.c.month == month,
            reservations.c.refunded_at.is_(None),
        )
        .group_by(reservations.c.provider)
        .order_by(reservations.c.provider)
    ).all()
    return [ProviderUsage(r[0], int(r[1] or 0), int(r[2])) for r in rows]
