"""Storage helpers for tests that run on the folder and on a bucket alike: listing and
reading through the Storage interface only, and a proxy that tests subclass to slow or
break one operation of whichever storage the app was given."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from speechbatch.services.ports import Storage

# keys_older_than(-EVERYTHING) lists every key, however fresh (a folder's mtime and a
# bucket's LastModified are both at most "now").
EVERYTHING = 3600.0


def stored_keys(storage: Storage) -> list[str]:
    """Every key in the storage, sorted (temporary files of a folder included)."""
    return sorted(storage.keys_older_than(-EVERYTHING))


def read_stored(storage: Storage, key: str) -> bytes:
    """The bytes stored under ``key``."""
    with storage.open(key) as f:
        return f.read()


class StorageProxy:
    """Passes every operation to ``inner``; subclasses override the ones they change."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner

    def write(self, key: str, data: bytes) -> None:
        self.inner.write(key, data)

    def write_file(self, key: str, source: Path) -> None:
        self.inner.write_file(key, source)

    def open(self, key: str) -> BinaryIO:
        return self.inner.open(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def keys_older_than(self, seconds: float) -> Iterator[str]:
        return self.inner.keys_older_than(seconds)

    def abort_uploads_older_than(self, seconds: float) -> list[str]:
        return self.inner.abort_uploads_older_than(seconds)

    def download_url(self, key: str, content_type: str, filename: str) -> str | None:
        return self.inner.download_url(key, content_type, filename)
