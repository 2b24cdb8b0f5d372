"""Storage writes survive a machine crash: the file's data is synced before the rename,
and the directory (which holds the new name) after it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from speechbatch.adapters.storage import LocalStorage


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
