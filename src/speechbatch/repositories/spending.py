"""The spending repository: the monthly ledger, budgets, per-run billing, shared audio.

Every compare-and-set is one statement that returns whether it won. The reservation is
the budget's only guard: one upsert whose update is conditional on ``billed + n <=
budget`` on the ledger row itself, so concurrent runs in any number of processes
serialize on that row and can never overshoot.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from sqlalchemy import (
    Integer,
    Table,
    and_,
    bindparam,
    func,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.expression import ColumnElement, FunctionElement
from sqlalchemy.sql.selectable import TextualSelect
from sqlalchemy.types import String

from ..db import const
from ..models import Export, Item, ItemStatus, Job, Organization, Run, UsageMonth
from .riders import Rider

organizations = cast(Table, Organization.__table__)
usage_months = cast(Table, UsageMonth.__table__)
items = cast(Table, Item.__table__)
jobs = cast(Table, Job.__table__)
runs = cast(Table, Run.__table__)
exports = cast(Table, Export.__table__)

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
class Bill:
    """What ``bill_call`` answers: whether the call fit the budget (the bill is truthy
    then), and whether the rider it carried won (False without one, or when it did not
    fit: the caller then rolls the transaction back)."""

    fit: bool
    carried: bool = False

    def __bool__(self) -> bool:
        return self.fit


@dataclass(frozen=True)
class CallBill:
    """One provider call's bill, not yet run: the billing statements' parameters and the
    rider it carries. ``run`` bills it with statements of its own; on PostgreSQL an
    item's start carries it instead, as CTEs of its one statement (``bill_ctes``)."""

    params: dict[str, int]
    carrying: Rider | None = None

    def run(self, session: Session) -> Bill:
        """Bill the call now, in the session's transaction (see ``bill_call``)."""
        carrying, dialect = self.carrying, session.get_bind().dialect.name
        if carrying is not None and dialect == "postgresql":
            row = session.execute(_carrying(carrying.statement), self.statement_params()).first()
            return Bill(row is not None, row is not None and bool(row.carried))
        carried = carrying is not None and carrying.run(session)
        *before, reserve = _billing_statements(dialect).bill
        for statement in before:
            session.execute(statement, self.params)
        fit = session.execute(reserve, self.params).first() is not None
        return Bill(fit, fit and carried)

    def statement_params(self) -> dict[str, Any]:
        """Its parameters and its rider's, for the statement that carries it."""
        if self.carrying is None:
            return dict(self.params)
        return {**self.params, **self.carrying.params}


def _chunks(values: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(values), _CHUNK):
        yield values[start : start + _CHUNK]


class Spending(Protocol):
    """What the services need of the ledger, budgets and stored audio."""

    def usage(self, organization_id: int) -> Usage: ...
    def set_budget(self, slug: str, characters: int | None) -> int | None: ...
    def job_items(self, job_id: int, organization_id: int) -> tuple[str, list[Any]] | None: ...
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

    def call_bill(
        self,
        organization_id: int,
        job_id: int,
        attempt: int,
        characters: int,
        *,
        carrying: Rider | None = None,
    ) -> CallBill:
        """One call's bill (see ``bill_call``) for an item's start to carry in its own
        statement (``RunsRepository.finish_and_start_item``), or to run alone."""
        params = _ledger_params(organization_id, job_id, attempt, characters, calls=1)
        return CallBill(params, carrying)

    def bill_call(
        self,
        organization_id: int,
        job_id: int,
        attempt: int,
        characters: int,
        *,
        carrying: Rider | None = None,
    ) -> Bill:
        """Compare-and-set: bill one provider call of ``characters`` to this month, and
        add it to the run's share of the ledger; whether it fit the budget.

        The month's row is one upsert: the first call of a month inserts it (if it fits
        the budget at all), later ones add to it only while ``billed + n <= budget``; the
        guard is on the row being updated, which PostgreSQL re-checks on its newest
        version and SQLite writes under its one write lock. When it does not fit, the
        run's line moved anyway: the caller rolls the transaction back. On PostgreSQL the
        run's line is a CTE of the upsert (one round trip: this runs while the item's
        start holds its job's row), and so is ``carrying``, another repository's
        compare-and-set (the slot kept for this call); elsewhere that runs first.
        """
        return self.call_bill(organization_id, job_id, attempt, characters, carrying=carrying).run(
            self.session
        )

    def refund_characters(
        self, organization_id: int, job_id: int, attempt: int, characters: int
    ) -> None:
        """Take back one reserved call that was never sent (from the month and the run)."""
        # The run history changes: the job's ETag must too. The job row first, as in an
        # item's start (its fence): a refund and a start of the run take turns on that
        # row, so they cannot deadlock on the run's or the month's.
        params = _ledger_params(organization_id, job_id, attempt, -characters, calls=-1)
        for statement in _billing_statements(self._dialect).refund:
            self.session.execute(statement, params)

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

    def job_items(self, job_id: int, organization_id: int) -> tuple[str, list[Any]] | None:
        """A job's voice and its items' (status, text), in order; None when not the org's."""
        voice = self.session.execute(
            select(jobs.c.voice).where(
                jobs.c.id == job_id, jobs.c.organization_id == organization_id
            )
        ).scalar_one_or_none()
        if voice is None:
            return None
        rows = self.session.execute(
            select(items.c.status, items.c.text)
            .where(items.c.job_id == job_id)
            .order_by(items.c.position)
        ).all()
        return voice, list(rows)

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
        """Which of these storage keys an item's audio or an export's archive refers to."""
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
        return found

    def is_referenced(self, key: str) -> bool:
        """Whether any item still refers to a stored audio file."""
        return (
            self.session.execute(select(items.c.id).where(items.c.audio_path == key).limit(1))
        ).first() is not None


def _ledger_params(
    organization_id: int, job_id: int, attempt: int, characters: int, *, calls: int
) -> dict[str, int]:
    """The billing statements' parameters: characters and calls added (negative: given back)."""
    return {
        "p_org": organization_id,
        "p_n": characters,
        "p_calls": calls,
        "p_job": job_id,
        "p_attempt": attempt,
    }


@dataclass(frozen=True)
class _Billing:
    """A sent call's statements (the run's line, then the month's reservation; on
    PostgreSQL one statement), and a refund's (the job's version, the run, the month)."""

    bill: tuple[Any, ...]
    refund: tuple[Any, ...]


def bill_ctes(dialect: str, when: ColumnElement[bool] | None = None) -> tuple[Update, Any]:
    """A sent call's two writes (parameters p_org, p_n, p_calls, p_job, p_attempt): the
    run's line (+ n and one call) and the month's reservation, an upsert that returns
    the month's row only when the call fits the budget.

    With ``when``, a condition on another statement's CTEs, both change nothing unless
    it holds: an item's start carries them as CTEs of its one statement, billing only
    when it started an item that it will send.
    """
    organization_id = bindparam("p_org", type_=Integer)
    n = bindparam("p_n", type_=Integer)
    calls = bindparam("p_calls", type_=Integer)
    budget = (
        select(organizations.c.budget_characters)
        .where(organizations.c.id == organization_id)
        .scalar_subquery()
    )
    insert_fn = postgresql.insert if dialect == "postgresql" else sqlite.insert
    source = select(organization_id, db_month(), n, const(1)).where(
        or_(budget.is_(None), n <= budget)
    )
    run = update(runs).where(
        runs.c.job_id == bindparam("p_job", type_=Integer),
        runs.c.attempt == bindparam("p_attempt", type_=Integer),
    )
    if when is not None:
        source, run = source.where(when), run.where(when)
    upsert = insert_fn(usage_months).from_select(
        ["organization_id", "month", "billed_characters", "provider_calls"], source
    )
    reserve = upsert.on_conflict_do_update(
        index_elements=[usage_months.c.organization_id, usage_months.c.month],
        set_={
            "billed_characters": usage_months.c.billed_characters
            + upsert.excluded.billed_characters,
            "provider_calls": usage_months.c.provider_calls + const(1),
        },
        where=or_(
            budget.is_(None),
            usage_months.c.billed_characters + upsert.excluded.billed_characters <= budget,
        ),
    ).returning(usage_months.c.id)
    # The run's share of the ledger: + n and one call for a call, - n and - 1 for a refund.
    line = run.values(
        billed_characters=runs.c.billed_characters + n,
        provider_calls=runs.c.provider_calls + calls,
    )
    return line, reserve


@functools.cache
def _billing_statements(dialect: str) -> _Billing:
    """Built once per dialect: a call's billing runs while the item's start holds its
    job's row, so building it per call would lengthen that (parameters p_org, p_n,
    p_calls, p_job, p_attempt)."""
    organization_id = bindparam("p_org", type_=Integer)
    n = bindparam("p_n", type_=Integer)
    calls = bindparam("p_calls", type_=Integer)
    run, reserve = bill_ctes(dialect)
    month = (
        update(usage_months)
        .where(
            usage_months.c.organization_id == organization_id,
            usage_months.c.month == db_month(),
        )
        .values(
            billed_characters=usage_months.c.billed_characters + n,
            provider_calls=usage_months.c.provider_calls + calls,
        )
    )
    job = (
        update(jobs)
        .where(jobs.c.id == bindparam("p_job", type_=Integer))
        .values(version=jobs.c.version + 1)
    )
    if dialect == "postgresql":
        bill: tuple[Any, ...] = (reserve.add_cte(run.returning(runs.c.id).cte("run_line")),)
    else:
        bill = (run, reserve)
    return _Billing(bill=bill, refund=(job, run, month))


# PostgreSQL's reservation carrying a rider, per rider statement (there is one: the slot's
# renewal), built once: the rider's CTE, and in RETURNING whether it returned a row.
_CARRYING: dict[int, tuple[TextualSelect, Any]] = {}


def _carrying(rider: TextualSelect) -> Any:
    cached = _CARRYING.get(id(rider))
    if cached is None or cached[0] is not rider:
        (reserve,) = _billing_statements("postgresql").bill
        carried = rider.cte("carried")
        won = select(literal_column("1")).select_from(carried).exists().label("carried")
        cached = _CARRYING[id(rider)] = (rider, reserve.add_cte(carried).returning(won))
    return cached[1]
