"""Storage writes survive a machine crash: the file's data is synced before the rename,
and the directory (which holds the new name) after it. And the storage contract, on the
folder and on a bucket: whole-or-absent writes (a write killed midway leaves nothing
visible, and gc sweeps what it left), streamed reads, deletes, listings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from speechbatch.adapters.storage import LocalStorage, build_storage
from speechbatch.config import Settings
from speechbatch.services.ports import Storage
from tests.conftest import STORAGES
from tests.helpers import wait_for
from tests.support.storages import EVERYTHING, read_stored, stored_keys


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """What was synced and renamed, in order: ("fsync", path) and ("replace", target)."""
    seen: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        seen.append(("fsync", _fd_path(fd)))
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        real_replace(src, dst)
        seen.append(("replace", str(Path(dst).resolve())))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return seen


def test_the_directory_is_synced_after_the_rename(
    tmp_path: Path, events: list[tuple[str, str]]
) -> None:
    storage = LocalStorage(tmp_path)
    (tmp_path / "jobs").mkdir()
    storage.write("jobs/a.mp3", b"audio")
    target = str((tmp_path / "jobs" / "a.mp3").resolve())
    renamed = events.index(("replace", target))
    synced_before = [path for kind, path in events[:renamed] if kind == "fsync"]
    synced_after = [path for kind, path in events[renamed + 1 :] if kind == "fsync"]
    assert any(Path(p).name.startswith(".tmp-") for p in synced_before), events
    assert str((tmp_path / "jobs").resolve()) in synced_after, events
    assert (tmp_path / "jobs" / "a.mp3").read_bytes() == b"audio"


def test_new_directories_are_synced_into_their_parents(
    tmp_path: Path, events: list[tuple[str, str]]
) -> None:
    storage = LocalStorage(tmp_path / "audio")
    storage.write("org/7/job/3/a.mp3", b"audio")
    synced = {path for kind, path in events if kind == "fsync"}
    root = (tmp_path / "audio").resolve()
    for directory in (root, root / "org", root / "org/7", root / "org/7/job", root / "org/7/job/3"):
        assert str(directory) in synced, (directory, events)


# --- the storage contract, on the folder and on a bucket (SeaweedFS) ---------------------

BIG = 20 * 1024 * 1024 + 12_345  # more than two parts of a multipart upload


@pytest.fixture
def storage(storage_kind: str, storage_url: str | None, tmp_path: Path) -> Storage:
    """The storage the settings build: a folder, or a fresh bucket under a prefix."""
    return build_storage(Settings(storage_dir=str(tmp_path / "audio"), storage_url=storage_url))


@pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
def test_writes_reads_and_deletes(storage: Storage, tmp_path: Path) -> None:
    storage.write("jobs/1/1-a1.mp3", b"first")
    storage.write("jobs/1/1-a1.mp3", b"second, whole")  # replaced whole
    assert read_stored(storage, "jobs/1/1-a1.mp3") == b"second, whole"
    assert storage.exists("jobs/1/1-a1.mp3") and not storage.exists("jobs/1/2-a1.mp3")
    with pytest.raises(FileNotFoundError):
        storage.open("jobs/1/2-a1.mp3")
    big = tmp_path / "export.zip"
    big.write_bytes(os.urandom(BIG))
    storage.write_file("exports/1/export-1.zip", big)
    with storage.open("exports/1/export-1.zip") as f:
        assert f.read(10) == big.read_bytes()[:10]  # streamed: read in pieces
        assert f.read() == big.read_bytes()[10:]
    assert stored_keys(storage) == ["exports/1/export-1.zip", "jobs/1/1-a1.mp3"]
    assert list(storage.keys_older_than(3600)) == []  # all of them are fresh
    storage.delete("jobs/1/1-a1.mp3")
    storage.delete("jobs/1/1-a1.mp3")  # deleting what is gone is fine
    assert stored_keys(storage) == ["exports/1/export-1.zip"]
    assert storage.abort_uploads_older_than(0) == []


@pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
def test_keys_never_escape(storage: Storage) -> None:
    for key in ("../outside.mp3", "jobs/../../outside.mp3"):
        with pytest.raises(ValueError):
            storage.write(key, b"x")


# A child process that writes a big file slowly (a folder's copy sleeps between chunks; a
# bucket's upload is throttled), so that the test can kill it in the middle.
_SLOW_WRITER = """
import shutil, sys, time
from pathlib import Path
from boto3.s3.transfer import TransferConfig
from speechbatch.adapters import object_storage, storage as folder
from speechbatch.adapters.storage import build_storage
from speechbatch.config import Settings

real_copy = shutil.copyfileobj
def slow_copy(src, dst, length=0):
    while chunk := src.read(1024 * 1024):
        dst.write(chunk)
        time.sleep(0.2)
folder.shutil.copyfileobj = slow_copy
object_storage.TRANSFER = TransferConfig(
    multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024,
    max_concurrency=1, max_bandwidth=4 * 1024 * 1024,
)
url = sys.argv[1] or None
build_storage(Settings(storage_dir=sys.argv[2], storage_url=url)).write_file(
    "exports/1/export-1.zip", Path(sys.argv[3])
)
"""


@pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
def test_a_write_killed_midway_leaves_nothing_visible_and_gc_sweeps_its_remains(
    storage: Storage, storage_kind: str, storage_url: str | None, tmp_path: Path
) -> None:
    big = tmp_path / "export.zip"
    big.write_bytes(os.urandom(BIG))
    child = subprocess.Popen(
        [sys.executable, "-c", _SLOW_WRITER, storage_url or "", str(tmp_path / "audio"), str(big)]
    )
    try:
        # Killed once the write is under way: a part uploaded, or a temp file growing.
        if storage_kind == "s3":
            bucket = cast(Any, storage)

            def under_way() -> bool:
                uploads = bucket.client.list_multipart_uploads(Bucket=bucket.bucket)
                for upload in uploads.get("Uploads", []):
                    parts = bucket.client.list_parts(
                        Bucket=bucket.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    if parts.get("Parts"):
                        return True
                return False
        else:

            def under_way() -> bool:
                return any(
                    p.name.startswith(".tmp-") and p.stat().st_size > 0
                    for p in (tmp_path / "audio").rglob("*")
                )

        wait_for(under_way, timeout=30, interval=0.05)
        assert child.poll() is None, "the write ended before it could be killed"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert not storage.exists("exports/1/export-1.zip")
    with pytest.raises(FileNotFoundError):
        storage.open("exports/1/export-1.zip")
    remains = stored_keys(storage) + storage.abort_uploads_older_than(-EVERYTHING)
    assert (len(remains) == 1 and ".tmp-" in remains[0]) or "(unfinished upload)" in remains[0]
    assert stored_keys(storage) == [] or stored_keys(storage)[0].startswith("exports/1/.tmp-")


def test_a_key_under_a_folder_that_became_a_file_is_missing_not_an_error(tmp_path: Path) -> None:
    """A folder on a key's path replaced by a file (a broken disk, an operator's mistake):
    the key has no file, as a missing object has none (a 404 for a download, not a 503)."""
    storage = LocalStorage(tmp_path)
    storage.write("jobs/7/1-a1.mp3", b"audio")
    (tmp_path / "jobs" / "7").rename(tmp_path / "aside")
    (tmp_path / "jobs" / "7").write_bytes(b"not a directory")
    with pytest.raises(FileNotFoundError):
        storage.open("jobs/7/1-a1.mp3")
