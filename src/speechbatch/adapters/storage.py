"""Audio storage behind one small interface: write atomically, open, delete.

A folder here; a bucket in ``object_storage.py``; ``build_storage`` picks one from the
settings (SPEECHBATCH_STORAGE_URL, else SPEECHBATCH_STORAGE_DIR).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, BinaryIO

from speechbatch.config import Settings

if TYPE_CHECKING:
    from speechbatch.adapters.object_storage import S3Storage

# Temporary files of atomic writes; a process killed mid-write leaves one behind.
TEMP_PREFIX = ".tmp-"
_COPY_CHUNK = 1024 * 1024


class StorageUnavailable(OSError):
    """The store could not be reached or refused the operation (an OSError, like a full
    disk, so every caller that handles a failed write handles this one too)."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EIO, message)


class StepNotSupported(StorageUnavailable):
    """The store does not implement this operation (S3's ``NotImplemented``: s3rver and
    some appliances have no multipart listing), so retrying it cannot help."""


def build_storage(settings: Settings) -> LocalStorage | S3Storage:
    """The folder or the bucket the settings name."""
    location = settings.storage
    if location.bucket is not None:
        # Imported here: boto3 costs a fraction of a second that a folder deployment never needs.
        from speechbatch.adapters.object_storage import S3Storage

        return S3Storage(location.bucket, location.prefix)
    assert location.folder is not None
    return LocalStorage(location.folder)


class LocalStorage:
    """Files under one directory (a shared mount when there are several machines)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    def path(self, key: str) -> Path:
        """The file behind a key; keys never escape the root."""
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            raise ValueError(f"storage key escapes the root: {key!r}")
        return path

    def write(self, key: str, data: bytes) -> None:
        """Write atomically and durably: a reader sees the old file or the whole new one,
        never a part, and once this returns a machine crash cannot lose it.

        The data is synced before the rename, and the directory after it: the new name
        lives in the directory, so without that sync a crash can leave an item DONE in
        the database with no file behind its key.
        """
        self._publish(key, lambda f: f.write(data))

    def write_file(self, key: str, source: Path) -> None:
        """Copy a file in, whole or absent and durable as ``write`` is, a chunk at a time."""
        with source.open("rb") as src:
            self._publish(key, lambda f: shutil.copyfileobj(src, f, _COPY_CHUNK))

    def _publish(self, key: str, fill: Callable[[IO[bytes]], object]) -> None:
        path = self.path(key)
        _make_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX, suffix=path.suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                fill(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _sync_directory(path.parent)

    def open(self, key: str) -> BinaryIO:
        """Open a stored file for reading; FileNotFoundError when the key has none (a
        folder on its path that is not one any more included: the file is not there)."""
        try:
            return self.path(key).open("rb")
        except NotADirectoryError as exc:
            raise FileNotFoundError(exc.errno, exc.strerror, exc.filename) from exc

    def exists(self, key: str) -> bool:
        """Whether a key has a file."""
        return self.path(key).is_file()

    def delete(self, key: str) -> None:
        """Delete a file if it is there."""
        self.path(key).unlink(missing_ok=True)

    def keys_older_than(self, seconds: float) -> Iterator[str]:
        """Keys of the files last written more than ``seconds`` ago (temporary ones too)."""
        cutoff = time.time() - seconds
        for path in self.root.rglob("*"):
            try:
                if path.is_file() and path.stat().st_mtime < cutoff:
                    yield path.relative_to(self.root).as_posix()
            except FileNotFoundError:
                continue  # deleted meanwhile

    def abort_uploads_older_than(self, seconds: float) -> list[str]:
        """A folder has no uploads apart from its temporary files (which gc lists)."""
        return []

    def download_url(self, key: str, content_type: str, filename: str) -> str | None:
        """A folder has no URL of its own: its files are served by the app."""
        return None


def _make_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each one synced into its parent."""
    if directory.is_dir():
        return
    _make_dirs(directory.parent)
    # Another writer may make it at the same moment: synced here too, not left to them.
    directory.mkdir(exist_ok=True)
    _sync_directory(directory.parent)


def _sync_directory(directory: Path) -> None:
    """fsync a directory, so that the names just created or renamed in it are durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
