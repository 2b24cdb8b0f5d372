"""Audio storage behind one small interface: write atomically, open, delete."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

# Temporary files of atomic writes; a process killed mid-write leaves one behind.
TEMP_PREFIX = ".tmp-"


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
        """Write atomically: a reader sees the old file or the whole new one, never a part."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX, suffix=path.suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

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
