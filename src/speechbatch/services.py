"""Service layer: plain verb functions over a unit of work. No Flask, no HTTP here."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Protocol

from sqlalchemy.exc import OperationalError

from . import metrics
from .accounts import (
    create_token,  # noqa: F401  (re-exported: tests and scripts import it here)
    hash_token,
    note_token_use,
)
from .config import Settings
from .errors import (
    AlreadyGenerating,
    NotFound,
    NothingToGenerate,
    Unauthorized,
    ValidationError,
)
from .models import JobStatus
from .passwords import hash_password
from .providers.base import TTSProvider
from .read import ITEM_STATUSES, JOB_STATUSES, ItemsPage, JobHead, JobPoll, Views, seen_version
from .repositories import UserRecord
from .spending import check_budget
from .uow import ReadScope, UowFactory, WriteUnit

log = logging.getLogger(__name__)

MAX_TITLE = 200
MAX_ITEMS = 5000
MAX_PAGE = 200


class RunStarter(Protocol):
    """What a claim needs of the runner: this process's worker id, its provider (for the
    budget check), and starting a run."""

    provider: TTSProvider

    def worker_id(self) -> int: ...
    def start(self, job_id: int, attempt: int) -> None: ...


@dataclass(frozen=True)
class Limits:
    """What a job may contain, given the configured provider."""

    voices: tuple[str, ...]
    max_chars: int


def database_is_up(uow_factory: UowFactory) -> bool:
    """Whether the database answers a trivial query."""
    try:
        with uow_factory(read_only=True) as uow:
            uow.views.ping()
    except Exception:
        log.warning("database health check failed", exc_info=True)
        return False
    return True


# --- users --------------------------------------------------------------------------


def _check_password(password: str) -> None:
    if len(password) < 8:
        raise ValidationError("the password must have at least 8 characters", field="password")


def create_admin(uow_factory: UowFactory, org_slug: str, email: str, password: str) -> int:
    """Create the organization if missing and an admin user in it; return the user id."""
    org_slug, email = org_slug.strip(), email.strip()
    if not org_slug or not email or "@" not in email:
        raise ValidationError("an organization slug and a valid email are required")
    _check_password(password)
    with uow_factory() as uow:
        org_id = uow.users.get_or_create_organization(org_slug)
        user_id = uow.users.create_user(org_id, email, hash_password(password))
        if user_id is None:
            raise ValidationError(f"a user with email {email} exists already", field="email")
        uow.commit()
    return user_id


def reset_password(uow_factory: UowFactory, email: str, password: str) -> None:
    """Give an existing user a new password (the quick start's demo admin on a re-run)."""
    _check_password(password)
    with uow_factory() as uow:
        if not uow.users.set_password_hash(email.strip(), hash_password(password)):
            raise NotFound(f"no user with email {email}")
        uow.commit()


def get_user(
    uow_factory: UowFactory, user_id: int, *, reads: ReadScope | None = None
) -> UserRecord | None:
    """A user by id, or None (a read: it never takes SQLite's write lock)."""
    if reads is not None:
        return reads.reader().users.get_user(user_id)
    with uow_factory(read_only=True) as uow:
        return uow.users.get_user(user_id)


# --- jobs ---------------------------------------------------------------------------


def _storable(text: str) -> bool:
    """Whether a text can be stored: no NUL, no lone surrogate (not valid UTF-8)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate_job(title: Any, voice: Any, texts: Any, limits: Limits) -> tuple[str, str, list[str]]:
    """Trim and check a job's input; raise ValidationError naming the field."""
    if not isinstance(title, str) or not title.strip():
        raise ValidationError("title is required", field="title")
    title = title.strip()
    if len(title) > MAX_TITLE:
        raise ValidationError(f"title is longer than {MAX_TITLE} characters", field="title")
    if not isinstance(voice, str) or voice.strip() not in limits.voices:
        raise ValidationError(f"voice must be one of: {', '.join(limits.voices)}", field="voice")
    if not isinstance(texts, list) or not texts:
        raise ValidationError("items must be a non-empty list of texts", field="items")
    if len(texts) > MAX_ITEMS:
        raise ValidationError(f"a job has at most {MAX_ITEMS} items", field="items")
    cleaned = []
    for n, text in enumerate(texts, start=1):
        if not isinstance(text, str):
            raise ValidationError(f"item {n} is not a text", field="items")
        text = text.strip()
        if not text:
            raise ValidationError(f"item {n} is empty", field="items")
        if len(text) > limits.max_chars:
            raise ValidationError(
                f"item {n} is longer than {limits.max_chars} characters", field="items"
            )
        if not _storable(text):
            raise ValidationError(f"item {n} contains a NUL or an invalid character", field="items")
        cleaned.append(text)
    if not _storable(title):
        raise ValidationError("title contains a NUL or an invalid character", field="title")
    return title, voice.strip(), cleaned


def create_job(
    uow_factory: UowFactory,
    user: UserRecord,
    title: Any,
    voice: Any,
    texts: Any,
    limits: Limits,
) -> int:
    """Validate and store a new PENDING job; return its id."""
    title, voice, cleaned = validate_job(title, voice, texts, limits)
    with uow_factory() as uow:
        job_id = uow.jobs.create_job(user.organization_id, user.id, title, voice, cleaned)
        uow.commit()
    return job_id


def recover_stale(
    uow_factory: UowFactory,
    settings: Settings,
    *,
    organization_id: int | None = None,
    job_id: int | None = None,
) -> int:
    """Lease-expiry recovery: end dead runs and fix orphan items; return how many jobs.

    Each job is recovered in its own short transaction, by a writer that waits for a busy
    row (or a busy SQLite) no longer than ``lock_timeout``: a row that another process
    holds, even one frozen inside its transaction, is left for a later read, and the read
    answers the state as it is. A read never fails, nor hangs, because of recovery.
    """
    recovered = 0
    try:
        with uow_factory(read_only=True) as uow:
            stale = uow.recovery.find_stale_jobs(
                lease_seconds=settings.lease_seconds,
                worker_dead_seconds=settings.worker_dead_seconds,
                organization_id=organization_id,
                job_id=job_id,
            )
            orphans = uow.recovery.find_orphan_item_jobs(
                organization_id=organization_id, job_id=job_id
            )
    except OperationalError:
        log.warning("recovery check skipped: database busy", exc_info=True)
        return 0
    for job in stale:
        if job.reason == "lease":
            message = (
                f"auto-recovered: no progress for over {settings.lease_seconds:g} s; "
                "Retry resumes without paying again for DONE items"
            )
        else:
            message = (
                f"auto-recovered: worker {job.worker} stopped heartbeating; "
                "Retry resumes without paying again for DONE items"
            )
        try:
            with uow_factory.impatient_writer() as uow:
                won = uow.recovery.recover_stale_job(
                    job,
                    lease_seconds=settings.lease_seconds,
                    worker_dead_seconds=settings.worker_dead_seconds,
                    message=message,
                )
                uow.commit()
        except OperationalError:
            log.warning("recovery of job %s skipped: row busy", job.job_id, exc_info=True)
            continue
        if won:
            recovered += 1
            metrics.RECOVERIES.labels(reason=job.reason).inc()
            metrics.RUNS.labels(outcome="RECOVERED").inc()
            log.warning(
                "job recovered job=%s attempt=%s reason=%s worker=%s",
                job.job_id, job.attempt, job.reason, job.worker,
            )  # fmt: skip
        else:
            log.info("recovery lost the race job=%s attempt=%s", job.job_id, job.attempt)
    for orphan_job_id in orphans:
        try:
            with uow_factory.impatient_writer() as uow:
                uow.recovery.recover_orphan_items(
                    orphan_job_id, "auto-recovered: left GENERATING after its run ended"
                )
                uow.commit()
        except OperationalError:
            log.warning("orphan items of job %s skipped: row busy", orphan_job_id)
    return recovered


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
        user = poll.user or who
        assert isinstance(user, UserRecord)
        reads.close()
        recover_stale(uow_factory, settings, organization_id=user.organization_id, job_id=job_id)
        poll = once()
    if poll.token_use_due is not None:
        note_token_use(uow_factory, poll.token_use_due)
    if poll.head is None:
        raise NotFound("job not found")
    if documents is not None:
        if poll.document is not None:
            documents.put(job_id, variant, poll.head.version, poll.document)
        elif cached is not None and cached.version == poll.head.version:
            documents.hit()
            poll = replace(poll, document=cached.text)
    return poll


def lease_of(head: JobHead, settings: Settings) -> dict[str, Any]:
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
    variant = "" if with_items else "-n"
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
        return Conditional(
            etag, _job_document(reads.statement().views, head, settings, with_items=with_items)
        )
    return Conditional(etag, _with_lease(poll.document, head, settings))


MAX_ITEMS_PAGE = 1000
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
) -> Conditional:
    """A page of a job's items in position order with their ``total`` (of that status),
    after recovery, as a conditional read: ``{"items": [...], "total": int}``."""
    if status is not None and status not in ITEM_STATUSES:
        raise ValidationError("status must be PENDING, GENERATING, DONE or ERROR", field="status")
    offset = _bounded("offset", offset, 0, 0, None)
    limit = _bounded("limit", limit, DEFAULT_ITEMS_PAGE, 1, MAX_ITEMS_PAGE)
    variant = f"-i{status or ''}-{offset}-{limit}"
    wanted = ItemsPage(status, min(offset, MAX_OFFSET), limit)
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
        page = reads.statement().views.items_json(
            head.id, status=status, offset=wanted.offset, limit=limit
        )
    total = head.total if status is None else head.counts[status]
    return Conditional(etag, f'{{"items": {page}, "total": {total}}}')


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
) -> Conditional:
    """A page of the organization's job summaries, newest first, after recovery:
    ``{"jobs": [...], "total", "page", "per_page"}``, as a conditional read."""
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
    stamp = reader.views.jobs_stamp(user.organization_id, status=status)
    etag = stamp.etag(f"-{status or ''}-{page}-{per_page}")
    if if_none_match(etag):
        return Conditional(etag, None)
    jobs = reader.views.jobs_json(
        user.organization_id,
        status=status,
        offset=min((page - 1) * per_page, MAX_OFFSET),
        limit=per_page,
    )
    body = f'{{"jobs": {jobs}, "total": {stamp.total}, "page": {page}, "per_page": {per_page}}}'
    return Conditional(etag, body)


def _document(answer: Conditional) -> dict[str, Any]:
    assert answer.body is not None
    result: dict[str, Any] = json.loads(answer.body)
    return result


def _scope(uow_factory: UowFactory, reads: ReadScope | None) -> ReadScope:
    """The caller's read transaction, or a new one (closed by the caller's ``with``)."""
    return reads if reads is not None else ReadScope(uow_factory)


def get_job(
    uow_factory: UowFactory,
    settings: Settings,
    user: UserRecord,
    job_id: int,
    *,
    reads: ReadScope | None = None,
) -> dict[str, Any]:
    """One job with its items and runs, after lease-expiry recovery (pages, 201 answers).

    Pass the request's ``reads`` to share its read transaction."""
    scope = _scope(uow_factory, reads)
    try:
        return _document(read_job(scope, uow_factory, settings, user, job_id))
    finally:
        if reads is None:
            scope.close()


def get_job_summary(
    uow_factory: UowFactory,
    settings: Settings,
    user: UserRecord,
    job_id: int,
    *,
    reads: ReadScope | None = None,
) -> dict[str, Any]:
    """One job without its items (with progress, runs and lease), after recovery: what
    ``GET /api/jobs/ID?items=none`` answers."""
    scope = _scope(uow_factory, reads)
    try:
        answer = read_job(scope, uow_factory, settings, user, job_id, with_items=False)
        return _document(answer)
    finally:
        if reads is None:
            scope.close()


def get_items_page(
    uow_factory: UowFactory,
    settings: Settings,
    user: UserRecord,
    job_id: int,
    *,
    status: str | None = None,
    offset: int = 0,
    limit: int = DEFAULT_ITEMS_PAGE,
    reads: ReadScope | None = None,
) -> dict[str, Any]:
    """A page of a job's items: ``{"items": [...], "total": int}``, after recovery; what
    ``GET /api/jobs/ID/items`` answers."""
    scope = _scope(uow_factory, reads)
    try:
        answer = read_job_items(
            scope, uow_factory, settings, user, job_id, status=status, offset=offset, limit=limit
        )
        return _document(answer)
    finally:
        if reads is None:
            scope.close()


def list_jobs(
    uow_factory: UowFactory,
    settings: Settings,
    user: UserRecord,
    *,
    status: str | None = None,
    page: int = 1,
    per_page: int | None = None,
    reads: ReadScope | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """An organization's job summaries, newest first, after recovery; and the total."""
    scope = _scope(uow_factory, reads)
    try:
        answer = _document(
            read_jobs(
                scope, uow_factory, settings, user, status=status, page=page, per_page=per_page
            )
        )
    finally:
        if reads is None:
            scope.close()
    return answer["jobs"], answer["total"]


def start_generation(
    uow_factory: UowFactory,
    settings: Settings,
    runner: RunStarter,
    user: UserRecord,
    job_id: int,
    *,
    regenerate: bool = False,
) -> dict[str, Any]:
    """Claim a job (compare-and-set) and start its run in this process.

    Exactly one of any number of concurrent callers wins; the others get
    AlreadyGenerating (or NothingToGenerate when every item is DONE already).
    """
    worker_id = runner.worker_id()
    claimed = _claim(
        uow_factory, settings, runner, user, job_id, worker_id, regenerate, recovery_first=True
    )
    if claimed is None:
        # A dead run must not block the admin's retry: recover first (through writers of
        # its own), then claim.
        recover_stale(uow_factory, settings, organization_id=user.organization_id, job_id=job_id)
        claimed = _claim(
            uow_factory, settings, runner, user, job_id, worker_id, regenerate, recovery_first=False
        )
        assert claimed is not None
    attempt, view, reason = claimed
    if attempt is None:
        metrics.CLAIMS.labels(result="refused").inc()
        log.info("claim refused job=%s reason=%s", job_id, reason)
        if reason == "not_found":
            raise NotFound("job not found")
        if reason == "already_generating":
            raise AlreadyGenerating()
        raise NothingToGenerate()
    metrics.CLAIMS.labels(result="won").inc()
    log.info("claim won job=%s attempt=%s regenerate=%s", job_id, attempt, regenerate)
    runner.start(job_id, attempt)
    assert view is not None
    return view


def _claim(
    uow_factory: UowFactory,
    settings: Settings,
    runner: RunStarter,
    user: UserRecord,
    job_id: int,
    worker_id: int,
    regenerate: bool,
    *,
    recovery_first: bool,
) -> tuple[int | None, dict[str, Any] | None, str] | None:
    """One transaction: the job's head, the budget's hint and the claim, with the answer
    when it wins: (attempt, view, "") or (None, None, why it was refused).

    None (nothing written) when ``recovery_first`` and the job looks dead: its head
    (one indexed statement, as a poll reads it) is what tells, so the common click pays
    for no recovery pass.
    """
    with uow_factory() as uow:
        head = uow.views.job_head(
            job_id,
            user.organization_id,
            lease_seconds=settings.lease_seconds,
            worker_dead_seconds=settings.worker_dead_seconds,
        )
        if recovery_first and head is not None and head.needs_recovery:
            return None
        check_budget(uow.spending, runner.provider, user, job_id, regenerate=regenerate)
        attempt = uow.jobs.claim_job(
            job_id,
            user.organization_id,
            regenerate=regenerate,
            user_id=user.id,
            worker_id=worker_id,
        )
        if attempt is None:
            return None, None, uow.jobs.claim_refusal(job_id, user.organization_id)
        # The answer shows the claim as it commits (GENERATING at the new attempt),
        # however fast the run then goes.
        view = _claimed_view(uow, settings, user, job_id)
        uow.commit()
        return attempt, view, ""


def _claimed_view(
    uow: WriteUnit, settings: Settings, user: UserRecord, job_id: int
) -> dict[str, Any]:
    """The job as the claim's own transaction sees it."""
    head = uow.views.job_head(job_id, user.organization_id)
    assert head is not None
    result: dict[str, Any] = json.loads(_job_document(uow.views, head, settings, with_items=True))
    return result


def item_audio_key(
    uow_factory: UowFactory,
    user: UserRecord,
    job_id: int,
    item_id: int,
    *,
    reads: ReadScope | None = None,
) -> str:
    """The storage key of an item's audio; NotFound when it has none or is not yours."""
    scope = _scope(uow_factory, reads)
    try:
        key = scope.reader().views.item_audio(job_id, item_id, user.organization_id)
    finally:
        if reads is None:
            scope.close()
    if key is None:
        raise NotFound("no audio for this item")
    return key


def recover_all(uow_factory: UowFactory, settings: Settings) -> int:
    """Sweep every organization's dead jobs now; return how many were recovered."""
    return recover_stale(uow_factory, settings)


def parse_items_text(text: str) -> list[str]:
    """Items from pasted text or a TXT upload: one per non-blank line."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def parse_items_csv(text: str) -> list[str]:
    """Items from a CSV upload: the first column of each row (a 'text' header is skipped)."""
    import csv
    import io

    rows = [r for r in csv.reader(io.StringIO(text)) if r and r[0].strip()]
    if rows and rows[0][0].strip().lower() in ("text", "item", "items"):
        rows = rows[1:]
    return [r[0].strip() for r in rows]


def texts_of(values: Sequence[str]) -> list[str]:
    """Drop blank lines from a list of texts."""
    return [v for v in values if v.strip()]
