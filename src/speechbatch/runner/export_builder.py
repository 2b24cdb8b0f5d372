"""The export builder: an organization's finished audio packed into one ZIP, under the
renewed ``audio_export`` lock.

The builder holds no transaction while it packs files: it renews the lock in short
transactions (at least every third of the lease), writes the ZIP to a local temporary
file and hands it to the storage (``write_file``: whole or absent, in parts on a bucket),
then marks the export COMPLETED and releases the lock in one transaction fenced by the
grant's id. Each item's file in the archive is named by ``domain.archive.archive_names``
(unique whatever the keys), and the manifest lists every entry under that name.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from speechbatch.adapters.repositories.exports import DoneAudio
from speechbatch.adapters.uow import UowFactory, WriteUnit
from speechbatch.domain.archive import archive_names
from speechbatch.runner.lease import LeasedBuilder
from speechbatch.services.export_events import record_export_event
from speechbatch.services.ports import ExportTask, Storage

log = logging.getLogger(__name__)

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


def export_key(organization_id: int, export_id: int) -> str:
    """Where an export's archive lives; only the org's lock holder writes that folder."""
    return f"exports/{organization_id}/export-{export_id}.zip"


class ExportBuilder(LeasedBuilder):
    """Builds one export's ZIP in a background thread while renewing its lock."""

    kind = "export"

    def __init__(
        self, uow_factory: UowFactory, storage: Storage, task: ExportTask, deployment: str
    ) -> None:
        super().__init__(
            uow_factory,
            storage,
            task.export_id,
            lock_id=task.lock_id,
            holder=task.holder,
            ttl_seconds=task.ttl_seconds,
        )
        self.task = task
        self._deployment = deployment

    def still_running(self, uow: WriteUnit) -> bool:
        return uow.exports.is_running(self.task.export_id, self.task.lock_id)

    def build(self) -> None:
        task = self.task
        with self._uow_factory(read_only=True) as uow:
            audio = uow.exports.done_audio(task.organization_id)
        key = export_key(task.organization_id, task.export_id)
        self.lease.renew()
        # Built in a local temporary file (deleted on close), then handed to the storage
        # whole: a folder renames it into place, a bucket uploads it in parts.
        scratch = scratch_dir()
        prefix = f"{TEMP_PREFIX}{self._deployment}-{task.organization_id}-"
        # Holding the organization's lock, no live builder of this deployment writes such
        # a file: any there is a leftover of a holder that was killed.
        for leftover in scratch.glob(prefix + "*"):
            leftover.unlink(missing_ok=True)
        with tempfile.NamedTemporaryFile(dir=scratch, prefix=prefix, suffix=".zip") as f:
            count = self._write_zip(f, audio)
            f.flush()
            # Publish only while the grant is still ours (and for a full lease more).
            self.lease.renew(force=True)
            self.publish(key, Path(f.name))
        self.complete(lambda uow: self._completed(uow, key))
        log.info("export completed export=%s files=%s", task.export_id, count)

    def _completed(self, uow: WriteUnit, key: str) -> bool:
        """The export COMPLETED with its archive at ``key``, and its lock released,
        fenced by the grant; its event recorded when that won."""
        task = self.task
        if not uow.exports.complete_export(task.export_id, task.lock_id, task.holder, key):
            return False
        record_export_event(uow, task.organization_id, task.export_id)
        return True

    def _write_zip(self, f: Any, audio: list[DoneAudio]) -> int:
        manifest = io.StringIO()
        writer = csv.writer(manifest)
        writer.writerow(MANIFEST_HEADER)
        count = 0
        with zipfile.ZipFile(f, "w") as zf:
            for entry, name in zip(audio, archive_names(audio), strict=True):
                self.lease.renew()
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

    def end_failed(self, uow: WriteUnit, message: str) -> None:
        task = self.task
        if uow.exports.fail_export(task.export_id, task.lock_id, message):
            record_export_event(uow, task.organization_id, task.export_id)


def scratch_dir() -> Path:
    """This machine's folder of archives being built (under TMPDIR)."""
    folder = Path(tempfile.gettempdir()) / SCRATCH_FOLDER
    folder.mkdir(exist_ok=True)
    return folder


def wait_for_exports(timeout: float) -> bool:
    """Wait until this process's export builders have ended; whether they all did in time."""
    return ExportBuilder.wait_for_all(timeout)
