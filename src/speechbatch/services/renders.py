"""Renders: one audio file of a whole job, with chapters and captions, built under a lock.

``start_render`` checks that every item is DONE, takes the organization's lock of job type
``render:JOB_ID`` and inserts the render row in one transaction, then builds the file in a
background thread (``runner/render_builder.py``, of this process or of a worker's with the
worker tier), exactly as exports are built: the lock is renewed in short transactions, the
files are published while the grant is ours, and the render is completed and the lock
released in one transaction fenced by the grant.
A holder that dies stops renewing; the next read of the job's renders flips its render to
FAILED once the lease has run out, and the next ``start_render`` reclaims the lock.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import uuid
from typing import Any

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.renders import RenderRecord
from speechbatch.adapters.uow import UowFactory
from speechbatch.config import Settings
from speechbatch.domain import renders as rules
from speechbatch.domain.paragraphs import DEFAULT_PARAGRAPH_GAP_MS, PARAGRAPH_GAP_MS_MAX
from speechbatch.domain.presets import PRESETS
from speechbatch.domain.renders import RenderOptions
from speechbatch.domain.statuses import JobStatus, RenderStatus
from speechbatch.errors import (
    DatabaseUnavailable,
    JobNotComplete,
    LockHeld,
    NotFound,
    RenderInProgress,
    ValidationError,
)
from speechbatch.services.idempotency import KeyClaim, bind_key
from speechbatch.services.ports import Builders, RenderTask
from speechbatch.services.render_events import (
    CAPTION_KINDS,
    record_render_event,
    render_view,
)

log = logging.getLogger(__name__)

RECOVERED_MESSAGE = "auto-recovered: render holder stopped renewing its lock"
# A lock held in the worker tier's name: a worker takes it over (runner/builders.py).
QUEUED_HOLDER_PREFIX = "queued:"


def job_type(job_id: int) -> str:
    """The lock's job type: one render of a job at a time."""
    return f"render:{job_id}"


def _whole(body: dict[str, Any], name: str, default: int, top: int) -> int:
    value = body.get(name, default)
    # JSON does not tell 19 from 19.0: either is the whole number 19.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise ValidationError(f"{name} must be a whole number from 0 to {top}", field=name)
    return value


def parse_render_options(body: dict[str, Any]) -> RenderOptions:
    """A render request's options, validated (422 naming the field otherwise). A preset
    sets the loudness (so none may be given with it); ``acx`` makes MP3, the format
    it takes when none is given."""
    preset = body.get("preset")
    if preset is not None and preset not in PRESETS:
        raise ValidationError(f"preset must be null or one of: {', '.join(PRESETS)}", "preset")
    fmt = body.get("format", PRESETS[preset].formats[0] if preset else None)
    if fmt not in rules.FORMATS:
        raise ValidationError(f"format must be one of: {', '.join(rules.FORMATS)}", "format")
    if preset is not None and fmt not in PRESETS[preset].formats:
        raise ValidationError(f"the {preset} preset makes {PRESETS[preset].formats[0]}", "format")
    if preset is not None and "loudness_lufs" in body:
        raise ValidationError("loudness_lufs is the preset's: give one or the other", "preset")
    loudness = body.get("loudness_lufs", rules.DEFAULT_LOUDNESS)
    if loudness is not None and (
        isinstance(loudness, bool)
        or not isinstance(loudness, int | float)
        or not math.isfinite(loudness)
        or not rules.LOUDNESS_MIN <= loudness <= rules.LOUDNESS_MAX
    ):
        raise ValidationError(
            f"loudness_lufs must be null or a number from {rules.LOUDNESS_MIN:g} "
            f"to {rules.LOUDNESS_MAX:g}",
            field="loudness_lufs",
        )
    if preset is not None:
        loudness = PRESETS[preset].loudness_lufs
    return RenderOptions(
        format=str(fmt),
        gap_ms=_whole(body, "gap_ms", rules.DEFAULT_GAP_MS, rules.GAP_MS_MAX),
        chapter_gap_ms=_whole(
            body, "chapter_gap_ms", rules.DEFAULT_CHAPTER_GAP_MS, rules.CHAPTER_GAP_MS_MAX
        ),
        loudness_lufs=None if loudness is None else float(loudness),
        preset=preset,
        paragraph_gap_ms=_whole(
            body, "paragraph_gap_ms", DEFAULT_PARAGRAPH_GAP_MS, PARAGRAPH_GAP_MS_MAX
        ),
    )


def new_holder() -> str:
    """A holder name that says which process took the lock, unique per grant."""
    return f"{socket.gethostname()}:{os.getpid()}:render-{uuid.uuid4().hex}"


def recover_renders(uow_factory: UowFactory, job_id: int, *, render_id: int | None = None) -> int:
    """Lease-expiry recovery: fail RUNNING renders whose holder stopped renewing its lock.

    A read first looks (in a reader); only when something is dead does it open a writer
    that gives up on a busy database soon, leaving the recovery to a later read.
    """
    try:
        with uow_factory(read_only=True) as reader:
            if not reader.renders.any_dead_render(job_id, render_id=render_id):
                return 0
        with uow_factory.impatient_writer() as uow:
            recovered = uow.renders.recover_dead_renders(
                job_id, RECOVERED_MESSAGE, render_id=render_id
            )
            for record in recovered:
                record_render_event(uow, record)
            uow.commit()
    except DatabaseUnavailable:
        log.warning("render recovery skipped: database busy", exc_info=True)
        return 0
    for record in recovered:
        log.warning("render recovered render=%s job=%s", record.id, job_id)
    return len(recovered)


def start_render(
    uow_factory: UowFactory,
    settings: Settings,
    builders: Builders,
    user: UserRecord,
    job_id: int,
    body: dict[str, Any],
    idempotency: KeyClaim | None = None,
) -> dict[str, Any]:
    """Check the job is complete, take its render lock, record the render, and hand it to
    ``builders``. With ``idempotency``, the request's key is tied to the render as it is
    recorded.

    Raises NotFound for another organization's job, JobNotComplete unless every item is
    DONE with audio, RenderInProgress while another render of the job holds the lock.
    """
    options = parse_render_options(body)
    # With the worker tier the lock is held in its name, and a worker takes it over.
    queued = settings.runs_in_workers
    holder = QUEUED_HOLDER_PREFIX + new_holder() if queued else new_holder()
    ttl = settings.render_lock_ttl_seconds
    with uow_factory() as uow:
        job = uow.renders.renderable_job(job_id, user.organization_id)
        if job is None:
            raise NotFound("job not found")
        if job.status == JobStatus.GENERATING or job.items == 0 or job.items_ready < job.items:
            raise JobNotComplete()
        try:
            grant = uow.locks.acquire(user.organization_id, job_type(job_id), holder, ttl)
        except LockHeld:
            raise RenderInProgress() from None
        render_id = uow.renders.create_render(
            user.organization_id, job_id, user.id, grant.id, options
        )
        record = uow.renders.get_render(render_id, job_id, user.organization_id)
        bind_key(uow, idempotency, f"render:{job_id}:{render_id}")
        if queued:
            uow.workers.wake_workers()
        uow.commit()
    assert record is not None
    log.info("render started render=%s job=%s lock=%s", render_id, job_id, grant.id)
    if not queued:
        builders.build_render(render_task(record, job.title, job.items, holder, ttl))
    return render_view(record)


def render_task(
    record: RenderRecord, job_title: str, items: int, holder: str, ttl: float
) -> RenderTask:
    """What a builder needs to build ``record`` as ``holder`` of its lock."""
    assert record.lock_id is not None
    return RenderTask(
        render_id=record.id,
        organization_id=record.organization_id,
        job_id=record.job_id,
        job_title=job_title,
        items=items,
        lock_id=record.lock_id,
        holder=holder,
        ttl_seconds=ttl,
        options=record.options,
    )


def _job_exists(uow_factory: UowFactory, user: UserRecord, job_id: int) -> None:
    with uow_factory(read_only=True) as uow:
        if uow.renders.renderable_job(job_id, user.organization_id) is None:
            raise NotFound("job not found")


def list_renders(uow_factory: UowFactory, user: UserRecord, job_id: int) -> list[dict[str, Any]]:
    """A job's renders, newest first, after recovery."""
    _job_exists(uow_factory, user, job_id)
    recover_renders(uow_factory, job_id)
    with uow_factory(read_only=True) as uow:
        records = uow.renders.list_renders(job_id, user.organization_id)
    return [render_view(r) for r in records]


def _record(uow_factory: UowFactory, user: UserRecord, job_id: int, render_id: int) -> RenderRecord:
    recover_renders(uow_factory, job_id, render_id=render_id)
    with uow_factory(read_only=True) as uow:
        record = uow.renders.get_render(render_id, job_id, user.organization_id)
    if record is None:
        raise NotFound("render not found")
    return record


def get_render(
    uow_factory: UowFactory, user: UserRecord, job_id: int, render_id: int
) -> dict[str, Any]:
    """One render of one of the organization's jobs, after lease-expiry recovery."""
    return render_view(_record(uow_factory, user, job_id, render_id))


def render_file_key(
    uow_factory: UowFactory, user: UserRecord, job_id: int, render_id: int, kind: str
) -> tuple[str, str, str]:
    """A COMPLETED render's storage key, content type and download name of ``kind``
    (``audio``, ``vtt``, ``srt`` or ``zip``, its chapter files), named after the job's
    title; NotFound until it is COMPLETED (or when it has no such file)."""
    record = _record(uow_factory, user, job_id, render_id)
    keys = {
        "audio": (record.file_path, rules.CONTENT_TYPES[record.format]),
        "vtt": (record.vtt_path, CAPTION_KINDS["vtt"]),
        "srt": (record.srt_path, CAPTION_KINDS["srt"]),
        "zip": (record.zip_path, "application/zip"),
    }
    key, content_type = keys[kind]
    if record.status != RenderStatus.COMPLETED or not key:
        raise NotFound("this render has no file (yet)")
    with uow_factory(read_only=True) as uow:
        job = uow.renders.renderable_job(job_id, user.organization_id)
    title = job.title if job is not None else f"job {job_id}"
    suffix = " (chapters)" if kind == "zip" else ""
    return key, content_type, rules.file_name(title + suffix, key.rsplit(".", 1)[-1])
