"""The names of an export's files: one entry per item, never two with the same name.

An item's file is ``job-ID/KEY.mp3`` when it has a key, else ``job-ID/POSITION-item-ID.mp3``.
A key may equal another item's generated name, and two keys may differ only in case (one
file on the disks that ignore case, as macOS's and Windows' do): the later of such names
gets ``-2``, ``-3``, ... before its suffix. Keys are named first, so a key keeps its name
unless an earlier key equal but for case has it; the manifest names each item's real entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Protocol


class ArchivedItem(Protocol):
    """What naming an item's file needs of it."""

    @property
    def job_id(self) -> int: ...
    @property
    def item_id(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def key(self) -> str | None: ...
    @property
    def audio_path(self) -> str: ...


def _base(item: ArchivedItem) -> tuple[str, str, str]:
    """An item's folder, stem and suffix before any renaming."""
    stem = item.key or f"{item.position:04d}-item-{item.item_id}"
    return f"job-{item.job_id}", stem, PurePosixPath(item.audio_path).suffix


def archive_names(items: Sequence[ArchivedItem]) -> list[str]:
    """Each item's entry in the archive, in the items' order, unique even ignoring case.

    First every key takes its own name (the first of keys equal but for case), then the
    rest take theirs, or the first free ``-N`` after it."""
    names: list[str | None] = [None] * len(items)
    taken: set[str] = set()
    for n, item in enumerate(items):
        folder, stem, suffix = _base(item)
        name = f"{folder}/{stem}{suffix}"
        if item.key is not None and name.casefold() not in taken:
            taken.add(name.casefold())
            names[n] = name
    for n, item in enumerate(items):
        if names[n] is not None:
            continue
        folder, stem, suffix = _base(item)
        name, copy = f"{folder}/{stem}{suffix}", 1
        while name.casefold() in taken:
            copy += 1
            name = f"{folder}/{stem}-{copy}{suffix}"
        taken.add(name.casefold())
        names[n] = name
    return [name for name in names if name is not None]
