"""Exports: an organization's finished audio as one ZIP, built under the audio_export lock.

``start_export`` takes the organization's ``audio_export`` lock and inserts the export row
in one transaction, then hands the archive to the background builders
(``runner/export_builder.py``: a thread of this process, or a worker's with the worker
tier), which renew the lock while they build and complete the export in one transaction
fenced by the grant's id. A holder that dies stops renewing; the next read of the export
(``get_export``) flips it to FAILED once the lease has run out, and the next
``start_export`` reclaims the expired lock.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import UowFactory
from speechbatch.config import Settings
from speechbatch.domain.statuses import ExportStatus
from speechbatch.errors import DatabaseUnavailable, ExportInProgress, LockHeld, NotFound
from speechbatch.services.export_events import export_view, record_export_event
from speechbatch.services.idempotency import KeyClaim, bind_key
from speechbatch.services.ports import Builders, ExportTask

log = logging.getLogger(__name__)

JOB_TYPE = "audio_export"
RECOVERED_MESSAGE = "auto-recovered: export holder stopped renewing its lock"
NO_WORKER_MESSAGE = "auto-recovered: no worker took the export within its lock's lease"
# A lock held in the name of the worker tier: a worker takes it over (runner/builders.py).
QUEUED_HOLDER_PREFIX = "queued:"


def new_holder() -> str:
    """A holder name that says which process took the lock, unique per grant."""
    return f"{socket.gethostname()}:{os.getpid()}:export-{uuid.uuid4().hex}"


def recover_exports(
    uow_factory: UowFactory, organization_id: int, *, export_id: int | None = None
) -> int:
    """Lease-expiry recovery: fail RUNNING exports whose holder stopped renewing its lock.

    A read first looks (in a reader): only when something is dead does it open a writer,
    one that gives up on a busy row or database soon; a busy one is left for a later read.
    A read never fails, nor takes SQLite's write lock, because of it.
    """
    try:
        with uow_factory(read_only=True) as reader:
            if not reader.exports.any_dead_export(organization_id, export_id=export_id):
                return 0
        with uow_factory.impatient_writer() as uow:
            recovered = uow.exports.recover_dead_exports(
                organization_id,
                RECOVERED_MESSAGE,
                export_id=export_id,
                untaken=(QUEUED_HOLDER_PREFIX, NO_WORKER_MESSAGE),
            )
            for rid in recovered:
                record_export_event(uow, organization_id, rid)
            uow.commit()
    except DatabaseUnavailable:
        log.warning("export recovery skipped: database busy", exc_info=True)
        return 0
    for rid in recovered:
        log.warning("export recovered export=%s organization=%s", rid, organization_id)
    return len(recovered)


def start_export(
    uow_factory: UowFactory,
    settings: Settings,
    builders: Builders,
    user: UserRecord,
    idempotency: KeyClaim | None = None,
) -> dict[str, Any]:
    """Take the organization's export lock, record the export and hand it to ``builders``
    (with ``idempotency``, the request's key is tied to the export as it is recorded).

    Raises ExportInProgress while another holder has the lock live; a lock whose holder
    stopped renewing is reclaimed here once its lease has run out. With the worker tier
    (SPEECHBATCH_RUNNER=worker) the lock is held in its name and a worker builds it.
    """
    queued = settings.runs_in_workers
    holder = QUEUED_HOLDER_PREFIX + new_holder() if queued else new_holder()
    ttl = settings.export_lock_ttl_seconds
    with uow_factory() as uow:
        try:
            grant = uow.locks.acquire(user.organization_id, JOB_TYPE, holder, ttl)
        except LockHeld:
            raise ExportInProgress() from None
        repo = uow.exports
        export_id = repo.create_export(user.organization_id, user.id, grant.id)
        record = repo.get_export(export_id, user.organization_id)
        bind_key(uow, idempotency, f"export:{export_id}")
        if queued:
            uow.workers.wake_workers()
        uow.commit()
    assert record is not None
    log.info("export started export=%s lock=%s holder=%s", export_id, grant.id, holder)
    if queued:
        return export_view(record)
    task = ExportTask(
        export_id=export_id,
        organization_id=user.organization_id,
        lock_id=grant.id,
        holder=holder,
        ttl_seconds=ttl,
    )
    builders.build_export(task)
    return export_view(record)


def get_export(uow_factory: UowFactory, user: UserRecord, export_id: int) -> dict[str, Any]:
    """One export of the user's organization, after lease-expiry recovery."""
    recover_exports(uow_factory, user.organization_id, export_id=export_id)
    with uow_factory(read_only=True) as uow:
        record = uow.exports.get_export(export_id, user.organization_id)
    if record is None:
        raise NotFound("export not found")
    return export_view(record)


def list_exports(uow_factory: UowFactory, user: UserRecord) -> list[dict[str, Any]]:
    """The organization's recent exports, newest first, after recovery."""
    recover_exports(uow_factory, user.organization_id)
    with uow_factory(read_only=True) as uow:
        records = uow.exports.list_exports(user.organization_id)
    return [export_view(r) for r in records]


def export_download_key(uow_factory: UowFactory, user: UserRecord, export_id: int) -> str:
    """The storage key of a COMPLETED export's archive; NotFound otherwise."""
    recover_exports(uow_factory, user.organization_id, export_id=export_id)
    with uow_factory(read_only=True) as uow:
        record = uow.exports.get_export(export_id, user.organization_id)
    if record is None or record.status != ExportStatus.COMPLETED or not record.file_path:
        raise NotFound("no archive for this export (yet)")
    return record.file_path
