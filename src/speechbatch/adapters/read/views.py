"""The read side: the API's JSON, built by the database in one statement per answer.

Nothing here writes. A job's "head" (its row, counters, version and liveness, one
indexed statement) is all a conditional read needs: the ETag comes from it, so a 304
never builds the answer it does not send. The documents themselves are built by the
database (``json_build_object``/``json_agg`` on PostgreSQL, ``json_object``/
``json_group_array`` on SQLite) and returned as text, never loaded as ORM objects;
their statements are in ``statements``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import literal, select
from sqlalchemy.orm import Session

from speechbatch.adapters.models import JobStatus
from speechbatch.adapters.read.statements import (
    ITEM_STATUSES,
    head_statement,
    poll_statement,
    statements,
)
from speechbatch.adapters.repositories.tables import COUNTERS, items, jobs
from speechbatch.adapters.repositories.users import UserRecord

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
        ``version``, and nothing else of the database shows in the answer: a worker's
        heartbeat does not (a worker that stops beating gets its job recovered, which is
        a write). The lease settings the answer shows are in ``variant`` (see
        ``lease_variant``). The items' spoken texts are written by the stale pass, which
        bumps the version.
        """
        return f"{self.etag_prefix}{self.version}{variant}"

    @property
    def etag_prefix(self) -> str:
        """The ETag up to the version (see ``seen_version``)."""
        return etag_prefix(self.id)


def etag_prefix(job_id: int) -> str:
    """A job's ETags start with this, then the version, then the variant."""
    return f"j{job_id}-v"


def lease_variant(lease_seconds: float, worker_dead_seconds: float) -> str:
    """The part of a job's ETag variant that names the lease settings its answer shows:
    they change only with a restart, but a client's copy outlives one."""
    return f"-l{lease_seconds:g}-{worker_dead_seconds:g}"


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
    """Which page of a job's items a poll answers: of one status, or with a flag
    (``stale``, ``suspect``: then the document carries its own total), or all."""

    status: str | None
    offset: int
    limit: int
    flag: str | None = None

    @property
    def filter(self) -> str:
        """The page's statement: "all", "status", its flag, or "FLAG:status"."""
        if self.flag is not None:
            return self.flag + (":status" if self.status is not None else "")
        return "status" if self.status is not None else "all"


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
    """How many jobs a list has, and which jobs its page shows, at which versions."""

    total: int
    # The page's jobs as "id:version", newest first, comma-separated.
    shown: str = ""

    def etag(self, variant: str) -> str:
        """The list's ETag, from everything its answer is made of: the total and each
        job on the page at its version (a job's version names its summary). A job
        added, changed, or leaving a filtered list while another enters changes it,
        whatever the counts and sums."""
        digest = hashlib.blake2b(f"{self.total}/{self.shown}".encode(), digest_size=12)
        return f"l{self.total}-{digest.hexdigest()}{variant}"


@dataclass(frozen=True)
class ListPage:
    """A page of the list and its stamp, read by one statement (so from one snapshot:
    the ETag sent with a page always names that page)."""

    stamp: ListStamp
    document: str  # the page's JSON array


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

    def items_json(self, job_id: int, page: ItemsPage) -> str: ...

    def jobs_stamp(
        self,
        organization_id: int,
        *,
        status: str | None,
        offset: int = 0,
        limit: int = 0,
        q: str | None = None,
    ) -> ListStamp: ...

    def jobs_page(
        self,
        organization_id: int,
        *,
        status: str | None,
        offset: int,
        limit: int,
        q: str | None = None,
    ) -> ListPage: ...


class JobViews:
    """Read-only statements that answer the API's JSON, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._sql = statements(session.get_bind().dialect.name)

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
            head_statement(liveness),
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
            poll_statement(dialect, by_token, with_items, None if page is None else page.filter),
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

    def items_json(self, job_id: int, page: ItemsPage) -> str:
        """A page of the job's items in position order, as a JSON array (with a flag,
        ``{"items": [...], "total": n}``)."""
        return str(
            self.session.execute(
                self._sql.items_page[page.filter],
                {
                    "job_id": job_id,
                    "status": page.status,
                    "offset": page.offset,
                    "limit": page.limit,
                },
            ).scalar_one()
        )

    def jobs_stamp(
        self,
        organization_id: int,
        *,
        status: str | None,
        offset: int = 0,
        limit: int = 0,
        q: str | None = None,
    ) -> ListStamp:
        """The list's total and the (id, version) of the jobs on its page (``offset``,
        ``limit``; none with ``limit`` 0), from the job rows alone: what a conditional
        read of the list needs, without building the page. ``q``: titles containing it."""
        row = self.session.execute(
            self._sql.jobs_stamp[status is not None, bool(q)],
            _list_params(organization_id, status, offset, limit, q),
        ).one()
        return ListStamp(int(row.total), row.shown or "")

    def jobs_page(
        self,
        organization_id: int,
        *,
        status: str | None,
        offset: int,
        limit: int,
        q: str | None = None,
    ) -> ListPage:
        """A page of the organization's job summaries, newest first, as a JSON array,
        with its stamp."""
        row = self.session.execute(
            self._sql.jobs_page[status is not None, bool(q)],
            _list_params(organization_id, status, offset, limit, q),
        ).one()
        return ListPage(ListStamp(int(row.total), row.shown or ""), str(row.document))


def _list_params(
    organization_id: int, status: str | None, offset: int, limit: int, q: str | None
) -> dict[str, Any]:
    """The list statements' parameters; ``q`` becomes a case-blind "contains" pattern."""
    pattern = None
    if q:
        escaped = q.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern = f"%{escaped}%"
    return {"org": organization_id, "status": status, "offset": offset, "limit": limit,
            "q": pattern}  # fmt: skip


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
