"""Plain reads for pages and answers: documents, the audio of an item, the health check."""

from __future__ import annotations

import json
import logging
from typing import Any

from speechbatch.adapters.read import DocumentCache
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import ReadScope, UowFactory
from speechbatch.config import Settings
from speechbatch.errors import (
    NotFound,
)
from speechbatch.services.polls import (
    DEFAULT_ITEMS_PAGE,
    Conditional,
    read_job,
    read_job_items,
    read_jobs,
)

log = logging.getLogger(__name__)


def database_is_up(uow_factory: UowFactory) -> bool:
    """Whether the database answers a trivial query."""
    try:
        with uow_factory(read_only=True) as uow:
            uow.views.ping()
    except Exception:
        log.warning("database health check failed", exc_info=True)
        return False
    return True


def _document(answer: Conditional) -> dict[str, Any]:
    assert answer.body is not None
    result: dict[str, Any] = json.loads(answer.body)
    return result


def open_reads(uow_factory: UowFactory, documents: DocumentCache | None = None) -> ReadScope:
    """A request's read transaction: the user lookup and the answer share it (the caller
    closes it)."""
    return ReadScope(uow_factory, documents)


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
    flag: str | None = None,
) -> dict[str, Any]:
    """A page of a job's items: ``{"items": [...], "total": int}``, after recovery; what
    ``GET /api/jobs/ID/items`` answers (``flag``: only stale or suspect items)."""
    scope = _scope(uow_factory, reads)
    try:
        answer = read_job_items(
            scope, uow_factory, settings, user, job_id,
            status=status, offset=offset, limit=limit, flag=flag,
        )  # fmt: skip
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
    q: str | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """An organization's job summaries (titles containing ``q``), newest first, after
    recovery; and the total."""
    scope = _scope(uow_factory, reads)
    try:
        answer = _document(
            read_jobs(
                scope,
                uow_factory,
                settings,
                user,
                status=status,
                page=page,
                per_page=per_page,
                q=q,
            )
        )
    finally:
        if reads is None:
            scope.close()
    return answer["jobs"], answer["total"]


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
