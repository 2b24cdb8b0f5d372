"""Conditional reads: a job, its items and the job list as the API answers them, with ETags."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import timedelta

from speechbatch.adapters.models import JobStatus
from speechbatch.adapters.read import (
    ITEM_STATUSES,
    JOB_STATUSES,
    DocumentCache,
    ItemsPage,
    JobHead,
    JobPoll,
    Views,
    lease_variant,
    seen_version,
)
from speechbatch.adapters.read.documents import Document
from speechbatch.adapters.read.statements import FLAG_SETS
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import ReadScope, UowFactory
from speechbatch.config import Settings
from speechbatch.errors import (
    NotFound,
    Unauthorized,
    ValidationError,
)
from speechbatch.services.accounts import (
    hash_token,
    note_token_use,
)
from speechbatch.services.recovery import recover_stale
from speechbatch.shapes.jobs import Lease

log = logging.getLogger(__name__)

MAX_PAGE = 200


@dataclass(frozen=True)
class Conditional:
    """A conditional read's answer: the ETag, and the JSON text unless not modified."""

    etag: str
    body: str | None

    @property
    def not_modified(self) -> bool:
        """Whether the client's copy is current (answer 304, build nothing)."""
        return self.body is None


def never_seen(etag: str) -> bool:
    """An ``if_none_match`` for unconditional reads."""
    return False


@dataclass(frozen=True)
class Bearer:
    """A bearer token not looked up yet: a poll's one statement authenticates it."""

    token: str


AUTHENTICATION_REQUIRED = "a valid bearer token or a signed-in session is required"


def _poll(
    reads: ReadScope,
    uow_factory: UowFactory,
    settings: Settings,
    who: UserRecord | Bearer,
    job_id: int,
    *,
    variant: str,
    seen_etags: Iterable[str],
    with_items: bool = True,
    page: ItemsPage | None = None,
) -> JobPoll:
    """The job's head after lease-expiry recovery and its document, unless the client's
    ETags name this version (of ``variant``): ONE statement in the common case, which
    also authenticates a bearer token (Unauthorized when it is unknown).

    Only a job that looks dead (or has orphan items) pays for the recovery pass, through
    writers, and is polled again.

    With the scope's document cache, the statement is told the version this process
    holds instead of the client's: an unchanged job's document then comes from the
    cache, and each version is built at most once per process (a client that holds the
    current version while the cache does not costs one build, then the 304).
    """
    seen = seen_version(seen_etags, job_id, variant)
    documents = reads.documents
    cached = documents.get(job_id, variant) if documents is not None else None

    def once() -> JobPoll:
        poll = reads.statement().views.poll_job(
            job_id,
            token_hash=hash_token(who.token) if isinstance(who, Bearer) else None,
            organization_id=None if isinstance(who, Bearer) else who.organization_id,
            with_items=with_items,
            page=page,
            seen_version=seen if cached is None else cached.version,
            lease_seconds=settings.lease_seconds,
            worker_dead_seconds=settings.worker_dead_seconds,
        )
        if poll is None:
            raise Unauthorized(AUTHENTICATION_REQUIRED)
        return poll

    poll = once()
    if poll.head is not None and poll.head.needs_recovery:
        reads.close()
        organization_id = _organization(poll, who)
        recover_stale(uow_factory, settings, organization_id=organization_id, job_id=job_id)
        poll = once()
    if poll.token_use_due is not None:
        note_token_use(uow_factory, poll.token_use_due)
    if poll.head is None:
        raise NotFound("job not found")
    return poll if documents is None else _through_cache(poll, documents, cached, variant)


def _through_cache(
    poll: JobPoll, documents: DocumentCache, cached: Document | None, variant: str
) -> JobPoll:
    """Keep a document the statement built; serve the cached one it did not rebuild."""
    assert poll.head is not None
    if poll.document is not None:
        documents.put(poll.head.id, variant, poll.head.version, poll.document)
    elif cached is not None and cached.version == poll.head.version:
        documents.hit()
        poll = replace(poll, document=cached.text)
    return poll


def _organization(poll: JobPoll, who: UserRecord | Bearer) -> int:
    """The organization of whoever asked (a token's user, read by the poll)."""
    user = poll.user or who
    assert isinstance(user, UserRecord)
    return user.organization_id


def lease_of(head: JobHead, settings: Settings) -> Lease:
    """The live run's lease: its worker, and when it expires without progress (database
    timestamps). Nothing here moves with the worker's heartbeats, so a heartbeat does
    not change the answer (nor its ETag); a worker that stops beating for
    ``worker_dead_seconds`` has its job recovered, which does."""
    live = head.status == JobStatus.GENERATING
    expires = head.last_progress_at + timedelta(seconds=settings.lease_seconds)
    return {
        "worker": head.worker,
        "last_progress_at": head.last_progress_at.isoformat(),
        "reclaim_count": head.reclaim_count,
        "lease_seconds": settings.lease_seconds,
        "worker_dead_seconds": settings.worker_dead_seconds,
        "expires_at": expires.isoformat() if live else None,
        # Items waiting for a deployment-wide provider slot or the pace (see slots.py).
        "waiting_for_slot": head.waiting_for_slot if live else 0,
        "waiting_for_pace": head.waiting_for_pace if live else 0,
    }


def _with_lease(document: str, head: JobHead, settings: Settings) -> str:
    """The job's JSON (built by the database) with the lease spliced in."""
    return f'{document[:-1]}, "lease": {json.dumps(lease_of(head, settings))}}}'


def _job_document(views: Views, head: JobHead, settings: Settings, *, with_items: bool) -> str:
    """The job's JSON, read now, with the lease spliced in."""
    return _with_lease(views.job_json(head.id, with_items=with_items), head, settings)


def read_job(
    reads: ReadScope,
    uow_factory: UowFactory,
    settings: Settings,
    user: UserRecord | Bearer,
    job_id: int,
    *,
    with_items: bool = True,
    if_none_match: Callable[[str], bool] = never_seen,
    seen_etags: Iterable[str] = (),
) -> Conditional:
    """One job as the API shows it, after lease-expiry recovery, as a conditional read.

    ``with_items=False`` leaves the items out (``?items=none``). ``user`` may be a
    ``Bearer`` token, authenticated by the same statement. ``seen_etags`` (the client's
    If-None-Match) lets the database skip building an answer the client has; when
    ``if_none_match`` accepts the ETag, the answer is a 304.
    """
    variant = ("" if with_items else "-n") + lease_variant(
        settings.lease_seconds, settings.worker_dead_seconds
    )
    poll = _poll(
        reads, uow_factory, settings, user, job_id,
        variant=variant, seen_etags=seen_etags, with_items=with_items,
    )  # fmt: skip
    head = poll.head
    assert head is not None
    etag = head.etag(variant)
    if if_none_match(etag):
        return Conditional(etag, None)
    if poll.document is None:  # the client named this version but does not match it
        body = _job_document(reads.statement().views, head, settings, with_items=with_items)
    else:
        body = _with_lease(poll.document, head, settings)
    return Conditional(etag, body)


MAX_ITEMS_PAGE = 1000
# A search longer than any title finds nothing more.
MAX_QUERY = 200


def _digest(text: str) -> str:
    """A short stable digest of a search (an ETag names it without quoting it)."""
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


DEFAULT_ITEMS_PAGE = 100
DEFAULT_JOBS_PAGE = 50


# Beyond any real number of rows, and within the databases' 64-bit OFFSET.
MAX_OFFSET = 2**53


def _bounded(name: str, value: int | None, default: int, low: int, high: int | None) -> int:
    """A paging parameter within bounds; ValidationError naming it otherwise."""
    if value is None:
        return default
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ValidationError(f"{name} must be {bounds}", field=name)
    return value


def read_job_items(
    reads: ReadScope,
    uow_factory: UowFactory,
    settings: Settings,
    user: UserRecord | Bearer,
    job_id: int,
    *,
    status: str | None = None,
    offset: int | None = None,
    limit: int | None = None,
    if_none_match: Callable[[str], bool] = never_seen,
    seen_etags: Iterable[str] = (),
    flag: str | None = None,
) -> Conditional:
    """A page of a job's items in position order with their ``total`` (of that status,
    or with that ``flag``: ``stale``, ``suspect`` or ``stale+suspect``), after recovery,
    as a conditional read: ``{"items": [...], "total": int}``."""
    if flag is not None and flag not in FLAG_SETS:
        raise ValidationError("flag must be stale, suspect or both", field="flag")
    if status is not None and status not in ITEM_STATUSES:
        raise ValidationError("status must be PENDING, GENERATING, DONE or ERROR", field="status")
    offset = _bounded("offset", offset, 0, 0, None)
    limit = _bounded("limit", limit, DEFAULT_ITEMS_PAGE, 1, MAX_ITEMS_PAGE)
    variant = f"-i{status or ''}{flag or ''}-{offset}-{limit}"
    wanted = ItemsPage(status, min(offset, MAX_OFFSET), limit, flag)
    poll = _poll(
        reads, uow_factory, settings, user, job_id,
        variant=variant, seen_etags=seen_etags, page=wanted,
    )  # fmt: skip
    head = poll.head
    assert head is not None
    etag = head.etag(variant)
    if if_none_match(etag):
        return Conditional(etag, None)
    page = poll.document
    if page is None:  # the client named this version but does not match it
        page = reads.statement().views.items_json(head.id, wanted)
    if flag is None:  # a flagged page's document carries its own total
        total = head.total if status is None else head.counts[status]
        page = f'{{"items": {page}, "total": {total}}}'
    return Conditional(etag, page)


def read_jobs(
    reads: ReadScope,
    uow_factory: UowFactory,
    settings: Settings,
    user: UserRecord,
    *,
    status: str | None = None,
    page: int | None = None,
    per_page: int | None = None,
    if_none_match: Callable[[str], bool] = never_seen,
    q: str | None = None,
) -> Conditional:
    """A page of the organization's job summaries, newest first, after recovery:
    ``{"jobs": [...], "total", "page", "per_page"}``, as a conditional read; ``q``
    keeps the jobs whose title contains it (case-blind)."""
    if q is not None and len(q) > MAX_QUERY:
        raise ValidationError(f"q is longer than {MAX_QUERY} characters", field="q")
    q = (q or "").strip() or None
    if status is not None and status not in JOB_STATUSES:
        raise ValidationError(
            "status must be PENDING, GENERATING, COMPLETED or FAILED", field="status"
        )
    page = _bounded("page", page, 1, 1, None)
    per_page = _bounded("per_page", per_page, DEFAULT_JOBS_PAGE, 1, MAX_PAGE)
    reader = reads.reader()
    # Lists recover dead jobs before answering; the common read only looks (one statement).
    if reader.recovery.anything_to_recover(
        user.organization_id,
        lease_seconds=settings.lease_seconds,
        worker_dead_seconds=settings.worker_dead_seconds,
    ):
        reads.close()
        recover_stale(uow_factory, settings, organization_id=user.organization_id)
        reader = reads.reader()
    org, offset = user.organization_id, min((page - 1) * per_page, MAX_OFFSET)
    variant = f"-{status or ''}-{page}-{per_page}" + (f"-q{_digest(q)}" if q else "")
    stamp = reader.views.jobs_stamp(org, status=status, offset=offset, limit=per_page, q=q)
    etag = stamp.etag(variant)
    if if_none_match(etag):
        return Conditional(etag, None)
    # The page comes with its own stamp: the ETag sent names the page sent.
    found = reader.views.jobs_page(org, status=status, offset=offset, limit=per_page, q=q)
    total = found.stamp.total
    body = f'{{"jobs": {found.document}, "total": {total}, "page": {page}, "per_page": {per_page}}}'
    return Conditional(found.stamp.etag(variant), body)
