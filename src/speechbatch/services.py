"""Service layer: plain verb functions over a unit of work. No Flask, no HTTP here."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import OperationalError
from werkzeug.security import check_password_hash, generate_password_hash

from . import metrics
from .config import Settings
from .errors import AlreadyGenerating, NotFound, NothingToGenerate, ValidationError
from .models import JobStatus
from .repositories.slots import SlotRepository
from .repository import UserRecord
from .runner import Runner
from .spending import check_budget
from .uow import UowFactory

log = logging.getLogger(__name__)

MAX_TITLE = 200
MAX_ITEMS = 5000
MAX_PAGE = 200


@dataclass(frozen=True)
class Limits:
    """What a job may contain, given the configured provider."""

    voices: tuple[str, ...]
    max_chars: int


def database_is_up(uow_factory: UowFactory) -> bool:
    """Whether the database answers a trivial query."""
    try:
        with uow_factory(read_only=True) as uow:
            uow.repo.ping()
    except Exception:
        log.warning("database health check failed", exc_info=True)
        return False
    return True


# --- users and tokens ---------------------------------------------------------------


def create_admin(uow_factory: UowFactory, org_slug: str, email: str, password: str) -> int:
    """Create the organization if missing and an admin user in it; return the user id."""
    org_slug, email = org_slug.strip(), email.strip()
    if not org_slug or not email or "@" not in email:
        raise ValidationError("an organization slug and a valid email are required")
    if len(password) < 8:
        raise ValidationError("the password must have at least 8 characters", field="password")
    with uow_factory() as uow:
        org_id = uow.repo.get_or_create_organization(org_slug)
        user_id = uow.repo.create_user(org_id, email, generate_password_hash(password))
        if user_id is None:
            raise ValidationError(f"a user with email {email} exists already", field="email")
        uow.commit()
    return user_id


def hash_token(token: str) -> str:
    """The stored form of an API token."""
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(uow_factory: UowFactory, email: str) -> str:
    """Create an API token for a user; the token is returned once and stored hashed."""
    token = "sb_" + secrets.token_urlsafe(32)
    with uow_factory(read_only=True) as uow:
        user = uow.repo.get_user_by_email(email.strip())
        if user is None:
            raise NotFound(f"no user with email {email}")
        uow.repo.create_token(user.id, hash_token(token))
        uow.commit()
    return token


def authenticate_token(uow_factory: UowFactory, token: str) -> UserRecord | None:
    """The user a bearer token belongs to, or None."""
    with uow_factory(read_only=True) as uow:
        return uow.repo.get_user_by_token(hash_token(token))


def authenticate_password(uow_factory: UowFactory, email: str, password: str) -> UserRecord | None:
    """The user with that email and password, or None."""
    with uow_factory(read_only=True) as uow:
        user = uow.repo.get_user_by_email(email.strip())
    if user is None or not check_password_hash(user.password_hash, password):
        return None
    return user


def get_user(uow_factory: UowFactory, user_id: int) -> UserRecord | None:
    """A user by id, or None."""
    with uow_factory() as uow:
        return uow.repo.get_user(user_id)


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
        job_id = uow.repo.create_job(user.organization_id, user.id, title, voice, cleaned)
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

    Each job is recovered in its own short transaction. A row that another process holds
    past ``lock_timeout`` (or a busy SQLite) is left for a later read: a read never fails
    because of recovery.
    """
    recovered = 0
    try:
        with uow_factory(read_only=True) as uow:
            stale = uow.repo.find_stale_jobs(
                lease_seconds=settings.lease_seconds,
                worker_dead_seconds=settings.worker_dead_seconds,
                organization_id=organization_id,
                job_id=job_id,
            )
            orphans = uow.repo.find_orphan_item_jobs(organization_id=organization_id, job_id=job_id)
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
            with uow_factory() as uow:
                won = uow.repo.recover_stale_job(
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
            with uow_factory() as uow:
                uow.repo.recover_orphan_items(
                    orphan_job_id, "auto-recovered: left GENERATING after its run ended"
                )
                uow.commit()
        except OperationalError:
            log.warning("orphan items of job %s skipped: row busy", orphan_job_id)
    return recovered


def get_job(
    uow_factory: UowFactory, settings: Settings, user: UserRecord, job_id: int
) -> dict[str, Any]:
    """One job as the API shows it, after lease-expiry recovery."""
    with uow_factory(read_only=True) as uow:
        view = uow.repo.get_job_view(
            job_id,
            user.organization_id,
            lease_seconds=settings.lease_seconds,
            worker_dead_seconds=settings.worker_dead_seconds,
        )
        if view is not None and view["status"] == JobStatus.GENERATING:
            slot, pace = SlotRepository(uow.session).waiting(job_id)
            view["lease"]["waiting_for_slot"] = slot
            view["lease"]["waiting_for_pace"] = pace
    if view is None:
        raise NotFound("job not found")
    # The common read costs one transaction; only a job that looks dead (or has orphan
    # items) pays for the recovery pass, and is read again after it.
    if view.pop("needs_recovery"):
        recover_stale(uow_factory, settings, organization_id=user.organization_id, job_id=job_id)
        with uow_factory(read_only=True) as uow:
            view = uow.repo.get_job_view(job_id, user.organization_id)
        if view is None:
            raise NotFound("job not found")
    return with_lease_expiry(view, settings)


def with_lease_expiry(view: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Add when the run would be declared dead, from the database's own timestamps."""
    lease = view["lease"]
    live = view["status"] == JobStatus.GENERATING
    lease["lease_seconds"] = settings.lease_seconds
    lease["worker_dead_seconds"] = settings.worker_dead_seconds
    lease["expires_at"] = None
    lease["worker_expires_at"] = None
    # Items waiting for a deployment-wide provider slot or the pace (see slots.py).
    lease.setdefault("waiting_for_slot", 0)
    lease.setdefault("waiting_for_pace", 0)
    if live:
        last = datetime.fromisoformat(lease["last_progress_at"])
        lease["expires_at"] = (last + timedelta(seconds=settings.lease_seconds)).isoformat()
        if lease["worker_heartbeat_at"]:
            beat = datetime.fromisoformat(lease["worker_heartbeat_at"])
            lease["worker_expires_at"] = (
                beat + timedelta(seconds=settings.worker_dead_seconds)
            ).isoformat()
    return view


def list_jobs(
    uow_factory: UowFactory,
    settings: Settings,
    user: UserRecord,
    *,
    status: str | None = None,
    page: int = 1,
    per_page: int | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """An organization's job summaries, newest first, after recovery; and the total."""
    if status is not None and status not in (
        JobStatus.PENDING, JobStatus.GENERATING, JobStatus.COMPLETED, JobStatus.FAILED,
    ):  # fmt: skip
        raise ValidationError("status must be PENDING, GENERATING, COMPLETED or FAILED")
    recover_stale(uow_factory, settings, organization_id=user.organization_id)
    limit = None if per_page is None else max(1, min(per_page, MAX_PAGE))
    offset = 0 if limit is None else (max(1, page) - 1) * limit
    with uow_factory(read_only=True) as uow:
        jobs = uow.repo.list_job_summaries(
            user.organization_id, status=status, limit=limit, offset=offset
        )
        total = uow.repo.count_jobs(user.organization_id, status=status)
    return jobs, total


def start_generation(
    uow_factory: UowFactory,
    settings: Settings,
    runner: Runner,
    user: UserRecord,
    job_id: int,
    *,
    regenerate: bool = False,
) -> dict[str, Any]:
    """Claim a job (compare-and-set) and start its run in this process.

    Exactly one of any number of concurrent callers wins; the others get
    AlreadyGenerating (or NothingToGenerate when every item is DONE already).
    """
    # A dead run must not block the admin's retry: recover first, then claim.
    recover_stale(uow_factory, settings, organization_id=user.organization_id, job_id=job_id)
    check_budget(uow_factory, runner.provider, user, job_id, regenerate=regenerate)
    worker_id = runner.worker_id()
    with uow_factory() as uow:
        attempt = uow.repo.claim_job(
            job_id,
            user.organization_id,
            regenerate=regenerate,
            user_id=user.id,
            worker_id=worker_id,
        )
        view = None
        if attempt is None:
            reason = uow.repo.claim_refusal(job_id, user.organization_id)
        else:
            # The answer shows the claim as it commits (GENERATING at the new attempt),
            # however fast the run then goes.
            view = uow.repo.get_job_view(job_id, user.organization_id)
            uow.commit()
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
    return with_lease_expiry(view, settings)


def item_audio_key(uow_factory: UowFactory, user: UserRecord, job_id: int, item_id: int) -> str:
    """The storage key of an item's audio; NotFound when it has none or is not yours."""
    with uow_factory(read_only=True) as uow:
        key = uow.repo.item_audio(job_id, item_id, user.organization_id)
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
