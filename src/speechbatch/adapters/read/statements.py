"""The read side's statements: the job's head and its poll (expression language), and
the JSON documents' SQL text per dialect, shaped like the answers (see ``views``).

Each is built once per shape and dialect; the parameters are bound per read.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

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
    null,
    or_,
    select,
    text,
    type_coerce,
)
from sqlalchemy.sql.elements import TextClause

from speechbatch.adapters.db import UTCDateTime
from speechbatch.adapters.models import Id, ItemStatus, JobStatus, RunOutcome
from speechbatch.adapters.read.json_sql import (
    array,
    as_text,
    embed,
    json_bool,
    mapping,
    obj,
    ts,
)
from speechbatch.adapters.repositories.recovery import has_orphan_items, looks_dead
from speechbatch.adapters.repositories.tables import (
    COUNTERS,
    api_tokens,
    items,
    jobs,
    runs,
    users,
    workers,
)
from speechbatch.adapters.repositories.tokens import last_use_due, token_accepted
from speechbatch.shapes import jobs as shapes
from speechbatch.shapes.schema import in_order

ITEM_STATUSES = tuple(ItemStatus)
# An items page shows every item, those of one status, or those with a flag.
ITEM_FLAGS = ("stale", "suspect")
# Flags combine with "+" (both), and a flagged page may also be of one status.
FLAG_SETS = (*ITEM_FLAGS, "+".join(ITEM_FLAGS))
PAGE_FILTERS = ("all", "status", *FLAG_SETS, *(f"{flags}:status" for flags in FLAG_SETS))
# The SQL condition of each flag on an item ``i`` (each has a partial index).
_FLAG_SQL = {"stale": "i.stale", "suspect": "i.suspect IS NOT NULL"}


@functools.cache
def poll_statement(
    dialect: str, by_token: bool, with_items: bool, page_filter: str | None
) -> Select[Any]:
    """The poll's one statement (see ``JobViews.poll_job``), built once per shape.

    By token: the token and its user, then the job outer-joined in their organization,
    so an unknown token reads no row and a job not theirs reads a row without a job.
    The document is a correlated subquery inside a CASE: the database builds it only for
    a job that exists for them and whose version is not the one the client has.
    """
    sql = statements(dialect)
    document_sql = sql.job[with_items] if page_filter is None else sql.items_page[page_filter]
    document = document_sql.columns(column("doc")).scalar_subquery()
    head = head_statement(True, by_token)
    return head.add_columns(
        case(
            (jobs.c.id.is_(None), null()),
            (jobs.c.version == bindparam("seen_version", type_=Integer), null()),
            else_=document,
        ).label("document")
    )


def _head_columns(liveness: bool, current_run: Any, current_worker: Any) -> list[Any]:
    """What a job's head shows: its row, counters, newest progress, reclaims, live run's
    worker and waits, and (``liveness``) whether it looks dead."""
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
        dead = or_(
            and_(
                jobs.c.status == JobStatus.GENERATING,
                looks_dead(
                    bindparam("lease_seconds", type_=Float),
                    bindparam("worker_dead_seconds", type_=Float),
                ),
            ),
            has_orphan_items(),
        )
        columns.append(case((dead, True), else_=False).label("needs_recovery"))
    return columns


@functools.cache
def head_statement(liveness: bool, by_token: bool = False) -> Select[Any]:
    """The head's one statement, built once (parameters: job_id, organization_id or,
    ``by_token``, token_hash; lease_seconds, worker_dead_seconds)."""
    current_run = runs.alias("current_run")
    current_worker = workers.alias("current_worker")
    columns = _head_columns(liveness, current_run, current_worker)
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
class Statements:
    """The JSON documents' SQL in one dialect, keyed by a flag (with items / filtered).

    Plain SQL text: these statements are shaped like the answer, and building them with
    the expression language at every request would cost more than running them.
    """

    job: dict[bool, TextClause]
    # Keyed by the page's filter: "all", "status", or a flag ("stale", "suspect").
    items_page: dict[str, TextClause]
    # Keyed by (filtered by status, searched by title).
    jobs_stamp: dict[tuple[bool, bool], TextClause]
    jobs_page: dict[tuple[bool, bool], TextClause]


@functools.cache
def statements(dialect: str) -> Statements:
    pg = dialect == "postgresql"
    flags = (True, False)
    lists = [(f, q) for f in flags for q in flags]
    return Statements(
        job={f: text(_job_sql(pg, f)) for f in flags},
        items_page={f: text(_items_sql(pg, f)) for f in PAGE_FILTERS},
        jobs_stamp={k: text(_jobs_stamp_sql(pg, *k)) for k in lists},
        jobs_page={k: text(_jobs_sql(pg, *k)) for k in lists},
    )


_COVER_URL = "'/api/jobs/' || j.id || '/cover'"


def _summary_pairs(pg: bool) -> list[tuple[str, str]]:
    total = " + ".join(f"j.{c.key}" for c in COUNTERS.values())
    flagged = [
        (flag, f"(SELECT count(*) FROM items i WHERE i.job_id = j.id AND {_FLAG_SQL[flag]})")
        for flag in ITEM_FLAGS
    ]
    counters = {s.lower(): f"j.{COUNTERS[s].key}" for s in ITEM_STATUSES}
    progress = obj(pg, in_order(shapes.Progress, {"total": total, **counters, **dict(flagged)}))
    chapters = array(pg, _chapter_document(pg), _CHAPTER_ROWS, 'ch."index"')
    return in_order(
        shapes.JobSummary,
        {
            "id": "j.id",
            "title": "j.title",
            "author": "j.author",
            "cover_url": f"CASE WHEN j.cover_path IS NOT NULL THEN {_COVER_URL} END",
            "voice": "j.voice",
            "cast": mapping(pg, "cv.speaker", "cv.voice", _CAST_ROWS, "cv.speaker"),
            "status": "j.status",
            "attempt": "j.attempt",
            "error_message": "j.error_message",
            "created_at": ts(pg, "j.created_at"),
            "updated_at": ts(pg, "j.updated_at"),
            "started_at": ts(pg, "j.started_at"),
            "finished_at": ts(pg, "j.finished_at"),
            "options": "j.options::json" if pg else "json(j.options)",
            "chapters": embed(pg, chapters),
            "progress": progress,
        },
    )


_CAST_ROWS = "FROM cast_voices cv WHERE cv.job_id = j.id"
# A job's chapters in order; "index" is quoted: it is a keyword in both dialects.
_CHAPTER_ROWS = 'FROM chapters ch WHERE ch.job_id = j.id ORDER BY ch."index"'


def _chapter_document(pg: bool) -> str:
    """A chapter: its index, title, first item's position and number of items.

    Chapters are runs of consecutive positions, so a chapter's items are counted from the
    next chapter's first position (or the job's total), not by scanning the items."""
    total = " + ".join(f"j.{c.key}" for c in COUNTERS.values())
    count = (
        "coalesce((SELECT min(nx.first_position) FROM chapters nx WHERE nx.job_id = ch.job_id"
        f' AND nx."index" > ch."index"), {total} + 1) - ch.first_position'
    )
    return obj(
        pg,
        in_order(
            shapes.Chapter,
            {
                "index": 'ch."index"',
                "title": "ch.title",
                "first_position": "ch.first_position",
                "items": f"({count})",
            },
        ),
    )


def _item_document(pg: bool) -> str:
    audio = (
        "CASE WHEN i.audio_path IS NOT NULL THEN "
        "'/api/jobs/' || i.job_id || '/items/' || i.id || '/audio' END"
    )
    return obj(
        pg,
        in_order(
            shapes.Item,
            {
                "id": "i.id",
                "position": "i.position",
                "key": "i.key",
                "chapter": "i.chapter",
                "speaker": "i.speaker",
                "text": "i.text",
                # As the stale pass wrote it under the organization's rules (NULL: the
                # text itself, or not written yet: the pass catches up within seconds).
                "spoken_text": "coalesce(i.spoken_text, i.text)",
                "status": "i.status",
                "error_message": "i.error_message",
                "audio_url": audio,
                "reused": json_bool(pg, "i.reused"),
                "stale": json_bool(pg, "i.stale"),
                "duration_seconds": "i.duration_seconds",
                "suspect": "i.suspect",
                "updated_at": ts(pg, "i.updated_at"),
            },
        ),
    )


def _reserved(total: str) -> str:
    """``total`` over the run ``r``'s reservations that were not refunded."""
    return (
        f"SELECT COALESCE({total}, 0) FROM reservations v "
        "WHERE v.job_id = r.job_id AND v.attempt = r.attempt AND v.refunded_at IS NULL"
    )


def _job_sql(pg: bool, with_items: bool) -> str:
    run = obj(
        pg,
        in_order(
            shapes.Run,
            {
                "attempt": "r.attempt",
                "kind": "r.kind",
                "outcome": "r.outcome",
                "selected": "r.selected",
                "started_at": ts(pg, "r.started_at"),
                "finished_at": ts(pg, "r.finished_at"),
                "error_message": "r.error_message",
                "started_by": "u.email",
                "cancelled_by": "c.email",
                # What the run's reservations not refunded add up to (runs.billed_characters
                # and provider_calls hold what runs billed before reservations were rows).
                "billed_characters": f"r.billed_characters + ({_reserved('SUM(v.characters)')})",
                "provider_calls": f"r.provider_calls + ({_reserved('COUNT(*)')})",
                "worker": "CASE WHEN w.id IS NOT NULL THEN w.hostname || ':' || w.pid END",
            },
        ),
    )
    run_rows = (
        "FROM runs r LEFT JOIN users u ON u.id = r.started_by_id "
        "LEFT JOIN users c ON c.id = r.cancelled_by_id "
        "LEFT JOIN workers w ON w.id = r.worker_id WHERE r.job_id = j.id ORDER BY r.attempt"
    )
    columns = dict(_summary_pairs(pg))
    if with_items:
        item_rows = "FROM items i WHERE i.job_id = j.id ORDER BY i.position"
        columns["items"] = embed(pg, array(pg, _item_document(pg), item_rows, "i.position"))
    columns["runs"] = embed(pg, array(pg, run, run_rows, "r.attempt"))
    # The lease is spliced in per answer (services.polls); the items only when asked for.
    pairs = in_order(
        shapes.Job, columns, elsewhere=("lease",) if with_items else ("lease", "items")
    )
    return f"SELECT {as_text(pg, obj(pg, pairs))} FROM jobs j WHERE j.id = :job_id"


def _items_sql(pg: bool, page_filter: str) -> str:
    """A page of items as a JSON array; for a flag, ``{"items": [...], "total": n}``
    (the job's head counts statuses, not flags)."""
    flags, _, by_status = page_filter.partition(":")
    flagged = [_FLAG_SQL[flag] for flag in flags.split("+") if flag in _FLAG_SQL]
    where = "i.job_id = :job_id"
    if page_filter == "status" or by_status:
        where += " AND i.status = :status"
    where += "".join(f" AND {condition}" for condition in flagged)
    rows = f"FROM items i WHERE {where} ORDER BY i.position LIMIT :limit OFFSET :offset"
    page = array(pg, _item_document(pg), rows, "i.position")
    if not flagged:
        return f"SELECT {as_text(pg, page)}"
    total = f"(SELECT count(*) FROM items i WHERE {where})"
    return f"SELECT {as_text(pg, obj(pg, [('items', embed(pg, page)), ('total', total)]))}"


def _jobs_where(filtered: bool, searched: bool = False) -> str:
    where = "j.organization_id = :org" + (" AND j.status = :status" if filtered else "")
    # :q is a lower-case LIKE pattern whose own % _ and \ are escaped.
    return where + (" AND lower(j.title) LIKE :q ESCAPE '\\'" if searched else "")


def _jobs_page_rows(filtered: bool, searched: bool = False) -> str:
    """The page's rows of the list (a FROM ... clause)."""
    where = _jobs_where(filtered, searched)
    return f"FROM jobs j WHERE {where} ORDER BY j.id DESC LIMIT :limit OFFSET :offset"


def _jobs_stamp_columns(pg: bool, filtered: bool, searched: bool = False) -> str:
    """The list's ``total`` and ``shown`` (see ``ListStamp``), as two columns."""
    total = f"(SELECT count(*) FROM jobs j WHERE {_jobs_where(filtered, searched)}) AS total"
    rows = _jobs_page_rows(filtered, searched)
    pairs = f"SELECT j.id AS id, j.id || ':' || j.version AS pair {rows}"
    if pg:
        shown = f"(SELECT string_agg(x.pair, ',' ORDER BY x.id DESC) FROM ({pairs}) x)"
    else:  # SQLite aggregates in the subquery's order
        shown = f"(SELECT group_concat(x.pair, ',') FROM ({pairs}) x)"
    return f"{total}, {shown} AS shown"


def _jobs_stamp_sql(pg: bool, filtered: bool, searched: bool) -> str:
    return f"SELECT {_jobs_stamp_columns(pg, filtered, searched)}"


def _jobs_sql(pg: bool, filtered: bool, searched: bool) -> str:
    rows = _jobs_page_rows(filtered, searched)
    document = as_text(pg, array(pg, obj(pg, _summary_pairs(pg)), rows, "-j.id"))
    return f"SELECT {_jobs_stamp_columns(pg, filtered, searched)}, {document} AS document"
