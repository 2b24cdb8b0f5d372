"""The read side: the API's JSON, built by the database in one statement per answer.

Nothing here writes. A job's "head" (its row, counters, version and liveness, one
indexed statement) is all a conditional read needs: the ETag comes from it, so a 304
never builds the answer it does not send. The documents themselves are built by the
database (``json_build_object``/``json_agg`` on PostgreSQL, ``json_object``/
``json_group_array`` on SQLite) and returned as text, never loaded as ORM objects.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import (
    Float,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    case,
    column,
    func,
    literal,
    null,
    or_,
    select,
    text,
    type_coerce,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import TextClause

from ..db import UTCDateTime
from ..models import Id, ItemStatus, JobStatus, RunOutcome
from ..repositories.recovery import dead_worker, has_orphan_items, stale_progress
from ..repositories.tables import COUNTERS, api_tokens, items, jobs, runs, users, workers
from ..repositories.tokens import last_use_due, token_accepted
from ..repositories.users import UserRecord

ITEM_STATUSES = tuple(ItemStatus)
JOB_STATUSES = tuple(JobStatus)


@dataclass(frozen=True)
class JobHead:
    """What a conditional read of one job needs, without its items or runs."""

    id: int
    version: int
    status: str
    attempt: int
    counts: dict[str, int]  # per item status
    needs_recovery: bool
    worker: str | None
    last_progress_at: datetime
    reclaim_count: int
    # Items of the live run waiting for a deployment-wide provider slot or the pace.
    waiting_for_slot: int = 0
    waiting_for_pace: int = 0

    @property
    def total(self) -> int:
        """The job's number of items."""
        return sum(self.counts.values())

    def etag(self, variant: str = "") -> str:
        """A strong ETag that changes whenever the answer would.

        Every write of the job row (items moving, runs ending, recovery, a claim) bumps
        ``version``, and nothing else shows in the answer: a worker's heartbeat does not
        (a worker that stops beating gets its job recovered, which is a write).
        """
        return f"{self.etag_prefix}{self.version}{variant}"

    @property
    def etag_prefix(self) -> str:
        """The ETag up to the version (see ``seen_version``)."""
        return etag_prefix(self.id)


def etag_prefix(job_id: int) -> str:
    """A job's ETags start with this, then the version, then the variant."""
    return f"j{job_id}-v"


def seen_version(etags: Iterable[str], job_id: int, variant: str) -> int | None:
    """The job version that one of a client's ETags names for this variant, if any."""
    prefix = etag_prefix(job_id)
    for etag in etags:
        if etag.startswith(prefix) and etag.endswith(variant):
            number = etag[len(prefix) : len(etag) - len(variant)]
            if number.isdigit() and len(number) < 19:
                return int(number)
    return None


@dataclass(frozen=True)
class ItemsPage:
    """Which page of a job's items a poll answers."""

    status: str | None
    offset: int
    limit: int


@dataclass(frozen=True)
class JobPoll:
    """A poll's one statement: who asked, the job's head, and the answer unless the
    client's version is current (or there is no such job for them)."""

    user: UserRecord | None  # the token's user; None when asked for an organization
    head: JobHead | None
    document: str | None  # the job's JSON (without ``lease``) or the page's array
    # The token whose last use is due to be written (once a minute), if any.
    token_use_due: int | None = None


@dataclass(frozen=True)
class ListStamp:
    """How many jobs a list has, and a stamp that changes when any of them changes."""

    total: int
    version_sum: int
    newest_id: int

    def etag(self, variant: str) -> str:
        """The list's ETag: a job added, or any job changed, changes it."""
        return f"l{self.total}-{self.version_sum}-{self.newest_id}{variant}"


class Views(Protocol):
    """What the read services need of the read side."""

    def ping(self) -> None: ...

    def item_audio(self, job_id: int, item_id: int, organization_id: int) -> str | None: ...

    def job_head(
        self,
        job_id: int,
        organization_id: int,
        *,
        lease_seconds: float | None = None,
        worker_dead_seconds: float | None = None,
    ) -> JobHead | None: ...

    def job_json(self, job_id: int, *, with_items: bool) -> str: ...

    def poll_job(
        self,
        job_id: int,
        *,
        token_hash: str | None = None,
        organization_id: int | None = None,
        with_items: bool = True,
        page: ItemsPage | None = None,
        seen_version: int | None = None,
        lease_seconds: float,
        worker_dead_seconds: float,
    ) -> JobPoll | None: ...

    def items_json(self, job_id: int, *, status: str | None, offset: int, limit: int) -> str: ...

    def jobs_stamp(self, organization_id: int, *, status: str | None) -> ListStamp: ...

    def jobs_json(
        self, organization_id: int, *, status: str | None, offset: int, limit: int
    ) -> str: ...


class JobViews:
    """Read-only statements that answer the API's JSON, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._sql = _statements(session.get_bind().dialect.name)

    def ping(self) -> None:
        """One round trip to the database."""
        self.session.execute(select(literal(1))).scalar_one()

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

    def job_head(
        self,
        job_id: int,
        organization_id: int,
        *,
        lease_seconds: float | None = None,
        worker_dead_seconds: float | None = None,
    ) -> JobHead | None:
        """The job's row, counters, version and lease; with the lease settings, also
        whether it looks dead (or has orphan items), so the common read needs no
        separate recovery pass."""
        liveness = lease_seconds is not None and worker_dead_seconds is not None
        row = self.session.execute(
            _head_statement(liveness),
            {
                "job_id": job_id,
                "organization_id": organization_id,
                "lease_seconds": float(lease_seconds or 0),
                "worker_dead_seconds": float(worker_dead_seconds or 0),
            },
        ).first()
        return None if row is None else _head_of(row, liveness)

    def poll_job(
        self,
        job_id: int,
        *,
        token_hash: str | None = None,
        organization_id: int | None = None,
        with_items: bool = True,
        page: ItemsPage | None = None,
        seen_version: int | None = None,
        lease_seconds: float,
        worker_dead_seconds: float,
    ) -> JobPoll | None:
        """One statement for a poll: the token's user (by ``token_hash``; or the job is
        looked for in ``organization_id``), the job's head with its liveness, and the
        document (the job, or ``page`` of its items) unless the job's version is
        ``seen_version``. None when the token is unknown; a JobPoll without a head when
        the job is not found (or not theirs)."""
        by_token = token_hash is not None
        dialect = self.session.get_bind().dialect.name
        row = self.session.execute(
            _poll_statement(
                dialect, by_token, with_items, None if page is None else page.status is not None
            ),
            {
                "job_id": job_id,
                "token_hash": token_hash,
                "organization_id": organization_id,
                "lease_seconds": float(lease_seconds),
                "worker_dead_seconds": float(worker_dead_seconds),
                "seen_version": seen_version,
                "status": page.status if page else None,
                "offset": page.offset if page else 0,
                "limit": page.limit if page else 0,
            },
        ).first()
        if row is None:
            return None if by_token else JobPoll(None, None, None)
        user = UserRecord(row.user_id, row.user_organization_id, row.email) if by_token else None
        head = _head_of(row, True) if row.id is not None else None
        document = None if row.document is None else str(row.document)
        due = row.token_id if by_token and row.last_use_is_stale else None
        return JobPoll(user, head, document, due)

    def job_json(self, job_id: int, *, with_items: bool) -> str:
        """The job as the API shows it (without ``lease``), as JSON text."""
        return str(self.session.execute(self._sql.job[with_items], {"job_id": job_id}).scalar_one())

    def items_json(self, job_id: int, *, status: str | None, offset: int, limit: int) -> str:
        """A page of the job's items in position order, as a JSON array."""
        return str(
            self.session.execute(
                self._sql.items_page[status is not None],
                {"job_id": job_id, "status": status, "offset": offset, "limit": limit},
            ).scalar_one()
        )

    def jobs_stamp(self, organization_id: int, *, status: str | None) -> ListStamp:
        """The list's total and change stamp, from the job rows alone."""
        stmt = select(
            func.count(), func.coalesce(func.sum(jobs.c.version), 0), func.max(jobs.c.id)
        ).where(jobs.c.organization_id == organization_id)
        if status is not None:
            stmt = stmt.where(jobs.c.status == status)
        row: Any = self.session.execute(stmt).one()
        return ListStamp(int(row[0]), int(row[1]), int(row[2] or 0))

    def jobs_json(
        self, organization_id: int, *, status: str | None, offset: int, limit: int
    ) -> str:
        """A page of the organization's job summaries, newest first, as a JSON array."""
        return str(
            self.session.execute(
                self._sql.jobs_page[status is not None],
                {"org": organization_id, "status": status, "offset": offset, "limit": limit},
            ).scalar_one()
        )


def _head_of(row: Any, liveness: bool) -> JobHead:
    newest = row.updated_at
    if row.newest_item_at is not None:
        newest = max(newest, row.newest_item_at)
    return JobHead(
        id=row.id,
        version=row.version,
        status=row.status,
        attempt=row.attempt,
        counts={s: int(getattr(row, COUNTERS[s].key)) for s in ITEM_STATUSES},
        needs_recovery=bool(liveness and row.needs_recovery),
        worker=f"{row.hostname}:{row.pid}" if row.hostname else None,
        last_progress_at=newest,
        reclaim_count=int(row.reclaims),
        waiting_for_slot=max(0, int(row.waiting_for_slot or 0)),
        waiting_for_pace=max(0, int(row.waiting_for_pace or 0)),
    )


@functools.cache
def _poll_statement(
    dialect: str, by_token: bool, with_items: bool, filtered_page: bool | None
) -> Select[Any]:
    """The poll's one statement (see ``JobViews.poll_job``), built once per shape.

    By token: the token and its user, then the job outer-joined in their organization,
    so an unknown token reads no row and a job not theirs reads a row without a job.
    The document is a correlated subquery inside a CASE: the database builds it only for
    a job that exists for them and whose version is not the one the client has.
    """
    sql = _statements(dialect)
    document_sql = sql.job[with_items] if filtered_page is None else sql.items_page[filtered_page]
    document = document_sql.columns(column("doc")).scalar_subquery()
    head = _head_statement(True, by_token)
    return head.add_columns(
        case(
            (jobs.c.id.is_(None), null()),
            (jobs.c.version == bindparam("seen_version", type_=Integer), null()),
            else_=document,
        ).label("document")
    )


@functools.cache
def _head_statement(liveness: bool, by_token: bool = False) -> Select[Any]:
    """The head's one statement, built once (parameters: job_id, organization_id or,
    ``by_token``, token_hash; lease_seconds, worker_dead_seconds)."""
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
    columns: list[Any] = [
        jobs.c.id,
        jobs.c.version,
        jobs.c.status,
        jobs.c.attempt,
        jobs.c.updated_at,
        *COUNTERS.values(),
        newest_item.label("newest_item_at"),
        reclaims.label("reclaims"),
        current_worker.c.hostname,
        current_worker.c.pid,
        current_run.c.waiting_for_slot,
        current_run.c.waiting_for_pace,
    ]
    if liveness:
        looks_dead = or_(
            and_(
                jobs.c.status == JobStatus.GENERATING,
                or_(
                    stale_progress(bindparam("lease_seconds", type_=Float)),
                    dead_worker(bindparam("worker_dead_seconds", type_=Float)),
                ),
            ),
            has_orphan_items(),
        )
        columns.append(case((looks_dead, True), else_=False).label("needs_recovery"))
    job_id = bindparam("job_id", type_=Id)
    if by_token:
        # The token's user, and the job only if it is in their organization.
        columns = [
            users.c.id.label("user_id"),
            users.c.organization_id.label("user_organization_id"),
            users.c.email,
            api_tokens.c.id.label("token_id"),
            last_use_due().label("last_use_is_stale"),
            *columns,
        ]
        source: Any = api_tokens.join(users, users.c.id == api_tokens.c.user_id).outerjoin(
            jobs, and_(jobs.c.id == job_id, jobs.c.organization_id == users.c.organization_id)
        )
        where = token_accepted(bindparam("token_hash", type_=String))
    else:
        source = jobs
        where = and_(
            jobs.c.id == job_id,
            jobs.c.organization_id == bindparam("organization_id", type_=Id),
        )
    source = source.outerjoin(
        current_run,
        and_(current_run.c.job_id == jobs.c.id, current_run.c.attempt == jobs.c.attempt),
    ).outerjoin(current_worker, current_worker.c.id == current_run.c.worker_id)
    return select(*columns).select_from(source).where(where)


@dataclass(frozen=True)
class _Statements:
    """The JSON documents' SQL in one dialect, keyed by a flag (with items / filtered).

    Plain SQL text: these statements are shaped like the answer, and building them with
    the expression language at every request would cost more than running them.
    """

    job: dict[bool, TextClause]
    items_page: dict[bool, TextClause]
    jobs_page: dict[bool, TextClause]


@functools.cache
def _statements(dialect: str) -> _Statements:
    pg = dialect == "postgresql"
    flags = (True, False)
    return _Statements(
        job={f: text(_job_sql(pg, f)) for f in flags},
        items_page={f: text(_items_sql(pg, f)) for f in flags},
        jobs_page={f: text(_jobs_sql(pg, f)) for f in flags},
    )


def _ts(pg: bool, column: str) -> str:
    """An ISO 8601 UTC timestamp with offset and six digits of microseconds, as
    ``isoformat(timespec="microseconds")`` writes it."""
    if pg:
        # to_char(… AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'), defined
        # once by migration 0008 (STABLE: the planner inlines it).
        return f"sb_isotime({column})"
    # SQLite stores 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC).
    return f"(replace({column}, ' ', 'T') || '+00:00')"


def _obj(pg: bool, pairs: list[tuple[str, str]]) -> str:
    args = ", ".join(f"'{key}', {value}" for key, value in pairs)
    return f"json_build_object({args})" if pg else f"json_object({args})"


def _array(pg: bool, document: str, source: str, order: str) -> str:
    """A JSON array of ``document`` over the rows of ``source`` (a FROM ... clause)."""
    if pg:
        return (
            f"(SELECT coalesce(json_agg(x.doc ORDER BY x.k), '[]'::json) FROM "
            f"(SELECT {document} AS doc, {order} AS k {source}) x)"
        )
    # SQLite aggregates in the subquery's order; json() keeps each element an object.
    return f"(SELECT json_group_array(json(x.doc)) FROM (SELECT {document} AS doc {source}) x)"


def _text(pg: bool, document: str) -> str:
    """The document as text (the driver would parse PostgreSQL's json into objects)."""
    return f"({document})::text" if pg else document


def _embed(pg: bool, array: str) -> str:
    """An array subquery as a JSON value inside an object."""
    return array if pg else f"json({array})"


def _summary_pairs(pg: bool) -> list[tuple[str, str]]:
    total = " + ".join(f"j.{c.key}" for c in COUNTERS.values())
    progress = _obj(
        pg,
        [("total", total)] + [(s.lower(), f"j.{COUNTERS[s].key}") for s in ITEM_STATUSES],
    )
    return [
        ("id", "j.id"),
        ("title", "j.title"),
        ("voice", "j.voice"),
        ("status", "j.status"),
        ("attempt", "j.attempt"),
        ("error_message", "j.error_message"),
        ("created_at", _ts(pg, "j.created_at")),
        ("updated_at", _ts(pg, "j.updated_at")),
        ("started_at", _ts(pg, "j.started_at")),
        ("finished_at", _ts(pg, "j.finished_at")),
        ("progress", progress),
    ]


def _bool(pg: bool, column: str) -> str:
    """A boolean column as a JSON true/false (SQLite stores 0/1)."""
    return column if pg else f"json(CASE WHEN {column} THEN 'true' ELSE 'false' END)"


def _item_document(pg: bool) -> str:
    audio = (
        "CASE WHEN i.audio_path IS NOT NULL THEN "
        "'/api/jobs/' || i.job_id || '/items/' || i.id || '/audio' END"
    )
    return _obj(
        pg,
        [
            ("id", "i.id"),
            ("position", "i.position"),
            ("text", "i.text"),
            ("status", "i.status"),
            ("error_message", "i.error_message"),
            ("audio_url", audio),
            ("reused", _bool(pg, "i.reused")),
            ("updated_at", _ts(pg, "i.updated_at")),
        ],
    )


def _job_sql(pg: bool, with_items: bool) -> str:
    run = _obj(
        pg,
        [
            ("attempt", "r.attempt"),
            ("kind", "r.kind"),
            ("outcome", "r.outcome"),
            ("started_at", _ts(pg, "r.started_at")),
            ("finished_at", _ts(pg, "r.finished_at")),
            ("error_message", "r.error_message"),
            ("started_by", "u.email"),
            ("cancelled_by", "c.email"),
            ("billed_characters", "r.billed_characters"),
            ("provider_calls", "r.provider_calls"),
            ("worker", "CASE WHEN w.id IS NOT NULL THEN w.hostname || ':' || w.pid END"),
        ],
    )
    run_rows = (
        "FROM runs r LEFT JOIN users u ON u.id = r.started_by_id "
        "LEFT JOIN users c ON c.id = r.cancelled_by_id "
        "LEFT JOIN workers w ON w.id = r.worker_id WHERE r.job_id = j.id ORDER BY r.attempt"
    )
    pairs = _summary_pairs(pg)
    if with_items:
        item_rows = "FROM items i WHERE i.job_id = j.id ORDER BY i.position"
        pairs.append(("items", _embed(pg, _array(pg, _item_document(pg), item_rows, "i.position"))))
    pairs.append(("runs", _embed(pg, _array(pg, run, run_rows, "r.attempt"))))
    return f"SELECT {_text(pg, _obj(pg, pairs))} FROM jobs j WHERE j.id = :job_id"


def _items_sql(pg: bool, filtered: bool) -> str:
    where = "i.job_id = :job_id" + (" AND i.status = :status" if filtered else "")
    rows = f"FROM items i WHERE {where} ORDER BY i.position LIMIT :limit OFFSET :offset"
    return f"SELECT {_text(pg, _array(pg, _item_document(pg), rows, 'i.position'))}"


def _jobs_sql(pg: bool, filtered: bool) -> str:
    where = "j.organization_id = :org" + (" AND j.status = :status" if filtered else "")
    rows = f"FROM jobs j WHERE {where} ORDER BY j.id DESC LIMIT :limit OFFSET :offset"
    return f"SELECT {_text(pg, _array(pg, _obj(pg, _summary_pairs(pg)), rows, '-j.id'))}"
