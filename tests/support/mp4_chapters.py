"""The two chapter formats of an M4B, each read from the file's own atoms the way the
players that use it read it: the QuickTime chapter track (a text track that the audio
track names in ``tref/chap``: Apple's players, and FFmpeg) and Nero's ``moov/udta/chpl``
(the one some Android players and Audiobookshelf's tools read)."""

from __future__ import annotations

import struct
from collections.abc import Iterator

CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"udta", b"tref", b"edts"}


def children(data: bytes, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """(type, body start, end) of each atom between ``start`` and ``end``."""
    at = start
    while at + 8 <= end:
        size, kind = struct.unpack(">I4s", data[at : at + 8])
        header = 8
        if size == 1:
            size, header = struct.unpack(">Q", data[at + 8 : at + 16])[0], 16
        elif size == 0:
            size = end - at
        yield kind, at + header, at + size
        at += size


def child(data: bytes, start: int, end: int, kind: bytes) -> tuple[int, int]:
    """The body (start, end) of the first child of that type."""
    for found, body, stop in children(data, start, end):
        if found == kind:
            return body, stop
    raise KeyError(kind)


def path(data: bytes, start: int, end: int, *kinds: bytes) -> tuple[int, int]:
    """The body of the atom at ``kinds`` below (start, end)."""
    for kind in kinds:
        start, end = child(data, start, end, kind)
    return start, end


def _track_id(data: bytes, trak: tuple[int, int]) -> int:
    body, _ = child(data, *trak, b"tkhd")
    version = data[body]
    offset = body + (20 if version == 1 else 12)
    return int(struct.unpack(">I", data[offset : offset + 4])[0])


def _table(data: bytes, stbl: tuple[int, int], kind: bytes, width: int) -> list[tuple[int, ...]]:
    body, _ = child(data, *stbl, kind)
    count = struct.unpack(">I", data[body + 4 : body + 8])[0]
    return [
        struct.unpack(f">{width}I", data[body + 8 + 4 * width * i : body + 8 + 4 * width * (i + 1)])
        for i in range(count)
    ]


def quicktime_chapters(data: bytes) -> list[tuple[str, float]]:
    """(title, start seconds) of each sample of the chapter track the audio track names."""
    moov = child(data, 0, len(data), b"moov")
    traks = [(body, end) for kind, body, end in children(data, *moov) if kind == b"trak"]
    named: list[int] = []
    for trak in traks:
        try:
            body, end = path(data, *trak, b"tref", b"chap")
        except KeyError:
            continue
        named += [struct.unpack(">I", data[i : i + 4])[0] for i in range(body, end, 4)]
    (chapter_trak,) = [t for t in traks if _track_id(data, t) in named]
    mdhd, _ = path(data, *chapter_trak, b"mdia", b"mdhd")
    timescale = struct.unpack(">I", data[mdhd + 12 : mdhd + 16])[0]
    stbl = path(data, *chapter_trak, b"mdia", b"minf", b"stbl")
    durations = [d for count, d in _table(data, stbl, b"stts", 2) for _ in range(count)]
    sizes_body, _ = child(data, *stbl, b"stsz")
    fixed, count = struct.unpack(">II", data[sizes_body + 4 : sizes_body + 12])
    sizes = [fixed] * count if fixed else [
        struct.unpack(">I", data[sizes_body + 12 + 4 * i : sizes_body + 16 + 4 * i])[0]
        for i in range(count)
    ]  # fmt: skip
    offsets = [o for (o,) in _table(data, stbl, b"stco", 1)]
    runs = _table(data, stbl, b"stsc", 3)
    starts: list[int] = []
    for chunk, offset in enumerate(offsets, start=1):
        per_chunk = [n for first, n, _ in runs if first <= chunk][-1]
        for _ in range(per_chunk):
            starts.append(offset)
            offset += sizes[len(starts) - 1]
    titles = []
    for start in starts[: len(sizes)]:
        length = struct.unpack(">H", data[start : start + 2])[0]
        titles.append(data[start + 2 : start + 2 + length].decode("utf-8"))
    times, at = [], 0
    for duration in durations:
        times.append(at / timescale)
        at += duration
    return list(zip(titles, times, strict=True))


def nero_chapters(data: bytes) -> list[tuple[str, float]]:
    """(title, start seconds) of each entry of ``moov/udta/chpl`` (100 ns units)."""
    body, _ = path(data, 0, len(data), b"moov", b"udta", b"chpl")
    # version, flags, 4 reserved bytes (FFmpeg writes version 1), then the count.
    count = data[body + 8]
    at = body + 9
    found = []
    for _ in range(count):
        start = struct.unpack(">Q", data[at : at + 8])[0]
        length = data[at + 8]
        found.append((data[at + 9 : at + 9 + length].decode("utf-8"), start / 10_000_000))
        at += 9 + length
    return found
