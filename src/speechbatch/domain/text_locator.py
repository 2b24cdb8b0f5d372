"""Finding an item's text in a book's own text nodes, whitespace aside.

A read-along made from an imported EPUB wraps each sentence (or word) of each item in a
span of the book's own page. The book's text is a run of segments (text nodes, in
document order); an item's text came from them, but its whitespace did not survive the
import as it was. So both are compared by their non-space characters only: a position is
an index into the segments' non-space characters, and a piece is found by its own
non-space characters, forward from where the previous one ended. Pure string work.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Sequence
from dataclasses import dataclass


def _solid(text: str) -> str:
    return "".join(text.split())


@dataclass(frozen=True)
class Point:
    """A character of the segments: which segment, and its index in that segment."""

    segment: int
    offset: int


class TextStream:
    """The non-space characters of a run of segments, and where each one is."""

    def __init__(self, segments: Sequence[str]) -> None:
        self._segments = segments
        solid = [_solid(s) for s in segments]
        self.starts: list[int] = []
        at = 0
        for part in solid:
            self.starts.append(at)
            at += len(part)
        self.text = "".join(solid)
        self._cached: tuple[int, array[int]] = (-1, array("L"))

    def find(self, text: str, start: int, end: int | None = None) -> tuple[int, int] | None:
        """Where ``text`` (its non-space characters) is first found at or after ``start``
        (and before ``end``), as [from, to) positions; None when it is not, or is empty."""
        wanted = _solid(text)
        if not wanted:
            return None
        at = self.text.find(wanted, start, len(self.text) if end is None else end)
        return None if at < 0 else (at, at + len(wanted))

    def point(self, position: int) -> Point:
        """The segment and offset of the non-space character at ``position``."""
        segment = bisect.bisect_right(self.starts, position) - 1
        return Point(segment, self._offsets(segment)[position - self.starts[segment]])

    def _offsets(self, segment: int) -> array[int]:
        """Where each non-space character of a segment is in it. Points are asked in
        order, mostly several in one segment, so the last segment's are kept (one
        array, not one per segment: a book's worth would be hundreds of megabytes)."""
        if self._cached[0] != segment:
            text = self._segments[segment]
            offsets = array("L", (n for n, char in enumerate(text) if not char.isspace()))
            self._cached = (segment, offsets)
        return self._cached[1]
