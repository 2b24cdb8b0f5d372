"""A render's timeline and captions: pure arithmetic over sample counts, no I/O.

A render is the job's items in position order, each followed by silence before the next:
``gap_ms``, or ``chapter_gap_ms`` where the next item begins a chapter. Offsets are kept in
samples (exact) and shown in seconds; a chapter marker starts where its first item starts
and ends where the next chapter starts (the last one at the end of the file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Each format and the content type of its file.
CONTENT_TYPES = {"mp3": "audio/mpeg", "m4b": "audio/mp4"}
FORMATS = tuple(CONTENT_TYPES)
GAP_MS_MAX = 5000
CHAPTER_GAP_MS_MAX = 10000
LOUDNESS_MIN, LOUDNESS_MAX = -30.0, -10.0
DEFAULT_GAP_MS = 400
DEFAULT_CHAPTER_GAP_MS = 1500
DEFAULT_LOUDNESS = -18.0


@dataclass(frozen=True)
class RenderOptions:
    """What a render was asked for."""

    format: str
    gap_ms: int = DEFAULT_GAP_MS
    chapter_gap_ms: int = DEFAULT_CHAPTER_GAP_MS
    loudness_lufs: float | None = DEFAULT_LOUDNESS


@dataclass(frozen=True)
class Cue:
    """One item's caption: its text from ``start`` to ``end`` (seconds in the file)."""

    start: float
    end: float
    text: str


@dataclass(frozen=True)
class ChapterMark:
    """A chapter marker as the API shows it (seconds in the file)."""

    title: str
    start_seconds: float
    end_seconds: float

    def as_json(self) -> dict[str, object]:
        """The API's shape of a chapter marker."""
        return {
            "title": self.title,
            "start_seconds": self.start_seconds,
            "end_seconds": self.end_seconds,
        }


@dataclass
class Timeline:
    """Places items one after another, with their gaps, as their durations become known.

    ``chapter_titles`` maps the position of each chapter's first item to its title; a job
    without chapters gets one chapter named ``default_title`` that spans the whole file.
    Items before the first chapter (if any) make a chapter of that default title, so the
    markers always cover the file from 0.
    """

    rate: int
    options: RenderOptions
    chapter_titles: dict[int, str]
    default_title: str
    samples: int = 0
    items: int = 0
    _starts: list[tuple[str, int]] = field(default_factory=list)

    def gap_before(self, position: int) -> int:
        """Samples of silence before the item at ``position`` (none before the first)."""
        if self.items == 0:
            return 0
        ms = self.options.chapter_gap_ms if position in self.chapter_titles else self.options.gap_ms
        return self.rate * ms // 1000

    def place(self, position: int, text: str, item_samples: int) -> Cue:
        """Append the item at ``position`` (after its gap); its cue."""
        self.samples += self.gap_before(position)
        start = self.samples
        if position in self.chapter_titles:
            self._starts.append((self.chapter_titles[position], start))
        elif not self._starts:
            self._starts.append((self.default_title, 0))
        self.samples += item_samples
        self.items += 1
        return Cue(self.seconds(start), self.seconds(self.samples), text)

    def seconds(self, samples: int) -> float:
        """A sample offset in seconds, to the millisecond."""
        return round(samples / self.rate, 3)

    @property
    def duration_seconds(self) -> float:
        """The length of the file placed so far."""
        return self.seconds(self.samples)

    def chapters(self) -> list[ChapterMark]:
        """The chapter markers of the items placed so far (at least one)."""
        starts = self._starts or [(self.default_title, 0)]
        ends = [start for _, start in starts[1:]] + [self.samples]
        return [
            ChapterMark(title, self.seconds(start), self.seconds(end))
            for (title, start), end in zip(starts, ends, strict=True)
        ]


_SPACE = re.compile(r"\s+")


def _cue_text(text: str) -> str:
    """One line: a blank line would end the cue, and ``-->`` would start a timing."""
    return _SPACE.sub(" ", text).strip().replace("-->", "->")


def _stamp(seconds: float, separator: str) -> str:
    ms = round(seconds * 1000)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"


VTT_HEADER = "WEBVTT\n\n"


def vtt_cue(number: int, cue: Cue) -> str:
    """One WebVTT cue (numbered from 1), with the text escaped as WebVTT requires."""
    text = _cue_text(cue.text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f"{number}\n{_stamp(cue.start, '.')} --> {_stamp(cue.end, '.')}\n{text}\n\n"


def srt_cue(number: int, cue: Cue) -> str:
    """One SubRip cue (numbered from 1)."""
    return (
        f"{number}\n{_stamp(cue.start, ',')} --> {_stamp(cue.end, ',')}\n{_cue_text(cue.text)}\n\n"
    )
