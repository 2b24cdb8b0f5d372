"""Audio storage behind one small interface: write atomically, open, delete."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

# Temporary files of atomic writes; a process killed mid-write leaves one behind.
TEMP_PREFIX = ".tmp-"
_COPY_CHUNK = 1024 * 1024


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
        never a part, and once this returns a machine crash cannot lose it."""
        self._publish(key, lambda f: f.write(data))

    def write_file(self, key: str, source: Path) -> None:
        """Store a copy of the file ``source`` under ``key``, atomically and durably as
        ``write`` does; the file is copied in pieces, never read whole."""

        def copy(f: BinaryIO) -> None:
            with source.open("rb") as src:
                shutil.copyfileobj(src, f, _COPY_CHUNK)

        self._publish(key, copy)

    def _publish(self, key: str, fill: Callable[[BinaryIO], object]) -> None:
        """Fill a temporary file next to the key's file, sync it, rename it into place.

        The data is synced before the rename, and the directory after it: the new name
        lives in the directory, so without that sync a crash can leave an item DONE in
        the database with no file behind its key.
        """
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
        """Open a stored file for reading."""
        return self.path(key).open("rb")

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
