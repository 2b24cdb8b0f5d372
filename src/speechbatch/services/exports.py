"""Exports: an organization's finished audio as one ZIP, built under the audio_export lock.

``start_export`` takes the organization's ``audio_export`` lock and inserts the export row
in one transaction, then builds the archive in a background thread of this process. The
builder holds no transaction while it packs files: it renews the lock in short
transactions (at least every third of the lease), writes the ZIP to a local temp file and
hands it to the storage (``write_file``: whole or absent, in parts on a bucket), then
marks the export COMPLETED and releases the lock in one transaction that is fenced by
the grant's id. A holder that dies stops renewing; the next read of the export
(``get_export``) flips it to FAILED once the lease has run out, and the next
``start_export`` reclaims the expired lock.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import os
import socket
import tempfile
import time
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.exports import DoneAudio
from speechbatch.adapters.uow import UowFactory
from speechbatch.config import Settings
from speechbatch.domain.statuses import ExportStatus
from speechbatch.errors import DatabaseUnavailable, ExportInProgress, LockHeld, NotFound
from speechbatch.services.export_events import export_view, record_export_event
from speechbatch.services.lock_lease import LeasedBuilder, LeaseLost, LockLease
from speechbatch.services.ports import Storage

log = logging.getLogger(__name__)

JOB_TYPE = "audio_export"
RECOVERED_MESSAGE = "auto-recovered: export holder stopped renewing its lock"
NO_WORKER_MESSAGE = "auto-recovered: no worker took the export within its lock's lease"
MANIFEST_NAME = "manifest.csv"
# A spreadsheet reads a cell starting with one of these as a formula (or a field separator).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
MANIFEST_HEADER = (
    "job_id", "job_title", "position", "key", "text", "voice", "file_name", "bytes", "sha256",
)  # fmt: skip
_CHUNK = 1024 * 1024
# Archives being built, in the system's temp folder: .tmp-DEPLOYMENT-ORG-XXXX.zip, where
# DEPLOYMENT tells apart the databases of deployments (or tests) that share a machine.
SCRATCH_FOLDER = "speechbatch-exports"
TEMP_PREFIX = ".tmp-"


def spreadsheet_safe(cell: str) -> str:
    """``cell`` with a leading ``'`` when a spreadsheet would read it as a formula.

    The apostrophe is what spreadsheets themselves use to mark a cell as text.
    """
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def archive_name(entry: DoneAudio) -> str:
    """An item's file in the archive: ``job-ID/KEY.mp3`` when it has a key (unique in its
    job, and made of characters safe in a path), else by position and id."""
    stem = entry.key or f"{entry.position:04d}-item-{entry.item_id}"
    return f"job-{entry.job_id}/{stem}{Path(entry.audio_path).suffix}"


def export_key(organization_id: int, export_id: int) -> str:
    """Where an export's archive lives; only the org's lock holder writes that folder."""
    return f"exports/{organization_id}/export-{export_id}.zip"


# A lock held in the name of the worker tier: a worker takes it over (export_queue.py).
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
    uow_factory: UowFactory, settings: Settings, storage: Storage, user: UserRecord
) -> dict[str, Any]:
    """Take the organization's export lock, record the export and start building it.

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
        deployment=hashlib.sha256(settings.database_url.encode()).hexdigest()[:12],
    )
    ExportBuilder(uow_factory, storage, task).start()
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


# --- the builder ---------------------------------------------------------------------


@dataclass(frozen=True)
class ExportTask:
    """What a builder needs: the export, and the grant that fences its writes."""

    export_id: int
    organization_id: int
    lock_id: int
    holder: str
    ttl_seconds: float
    deployment: str = ""


class ExportBuilder(LeasedBuilder):
    """Builds one export's ZIP in a background thread while renewing its lock."""

    kind = "export"

    def __init__(self, uow_factory: UowFactory, storage: Storage, task: ExportTask) -> None:
        lease = LockLease(
            uow_factory,
            task.lock_id,
            task.holder,
            task.ttl_seconds,
            still_running=lambda uow: uow.exports.is_running(task.export_id, task.lock_id),
        )
        super().__init__(lease, task.export_id)
        self._uow_factory = uow_factory
        self._storage = storage
        self.task = task

    def build(self) -> None:
        task = self.task
        with self._uow_factory(read_only=True) as uow:
            audio = uow.exports.done_audio(task.organization_id)
        key = export_key(task.organization_id, task.export_id)
        self.lease.renew()
        # Built in a local temporary file (deleted on close), then handed to the storage
        # whole: a folder renames it into place, a bucket uploads it in parts.
        scratch = scratch_dir()
        prefix = f"{TEMP_PREFIX}{task.deployment}-{task.organization_id}-"
        # Holding the organization's lock, no live builder of this deployment writes such
        # a file: any there is a leftover of a holder that was killed.
        for leftover in scratch.glob(prefix + "*"):
            leftover.unlink(missing_ok=True)
        with tempfile.NamedTemporaryFile(dir=scratch, prefix=prefix, suffix=".zip") as f:
            count = self._write_zip(f, audio)
            f.flush()
            # Publish only while the grant is still ours (and for a full lease more).
            self.lease.renew(force=True)
            self._storage.write_file(key, Path(f.name))
        try:
            with self._uow_factory() as uow:
                won = uow.exports.complete_export(task.export_id, task.lock_id, task.holder, key)
                if won:
                    record_export_event(uow, task.organization_id, task.export_id)
                    uow.commit()
        except BaseException:
            self._storage.delete(key)
            raise
        if not won:
            # Our export was declared dead meanwhile; the archive is nobody's.
            self._storage.delete(key)
            raise LeaseLost()
        log.info("export completed export=%s files=%s", task.export_id, count)

    def _write_zip(self, f: Any, audio: list[DoneAudio]) -> int:
        manifest = io.StringIO()
        writer = csv.writer(manifest)
        writer.writerow(MANIFEST_HEADER)
        count = 0
        with zipfile.ZipFile(f, "w") as zf:
            for entry in audio:
                self.lease.renew()
                name = archive_name(entry)
                try:
                    source = self._storage.open(entry.audio_path)
                except FileNotFoundError:
                    # Replaced by a regenerate since the list was read: not DONE any more.
                    log.warning("export %s skips missing audio %s", self.task.export_id, name)
                    continue
                digest = hashlib.sha256()
                size = 0
                info = zipfile.ZipInfo(name, date_time=time.gmtime()[:6])
                info.compress_type = zipfile.ZIP_STORED  # audio is compressed already
                with source, zf.open(info, "w", force_zip64=True) as out:
                    while chunk := source.read(_CHUNK):
                        digest.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
                        self.lease.renew()
                row = (
                    entry.job_id,
                    spreadsheet_safe(entry.job_title),
                    entry.position,
                    entry.key or "",
                    spreadsheet_safe(entry.text),
                    entry.voice,
                )
                writer.writerow([*row, name, size, digest.hexdigest()])
                count += 1
            zf.writestr(MANIFEST_NAME, manifest.getvalue(), compress_type=zipfile.ZIP_DEFLATED)
        return count

    def fail(self, message: str) -> None:
        task = self.task
        try:
            with self._uow_factory() as uow:
                if uow.exports.fail_export(task.export_id, task.lock_id, message):
                    record_export_event(uow, task.organization_id, task.export_id)
                uow.locks.release(task.lock_id)
                uow.commit()
        except Exception:
            # Recovery finds it once the lease has run out.
            log.exception("could not record the failure of export %s", task.export_id)


def scratch_dir() -> Path:
    """This machine's folder of archives being built (under TMPDIR)."""
    folder = Path(tempfile.gettempdir()) / SCRATCH_FOLDER
    folder.mkdir(exist_ok=True)
    return folder


def wait_for_exports(timeout: float) -> bool:
    """Wait until this process's export builders have ended; whether they all did in time."""
    return ExportBuilder.wait_for_all(timeout)
