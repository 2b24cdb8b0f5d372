"""A render's timeline and captions: pure arithmetic over sample counts, no I/O.

A render is the job's items in position order, each followed by silence before the next:
``gap_ms``, or ``chapter_gap_ms`` where the next item begins a chapter (and inside an item,
``paragraph_gap_ms`` at each paragraph break: ``domain.paragraphs``). Offsets are kept in
samples (exact) and shown in seconds; a chapter marker starts where its first item starts
and ends where the next chapter starts (the last one at the end of the file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from speechbatch.domain.paragraphs import DEFAULT_PARAGRAPH_GAP_MS

# Each format and the content type of its file; an EPUB (a read-along book) carries MP3.
CONTENT_TYPES = {"mp3": "audio/mpeg", "m4b": "audio/mp4", "epub": "application/epub+zip"}
FORMATS = tuple(CONTENT_TYPES)
AUDIO_FORMATS = ("mp3", "m4b")
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
    preset: str | None = None
    paragraph_gap_ms: int = DEFAULT_PARAGRAPH_GAP_MS

    @property
    def audio_format(self) -> str:
        """The format of the audio it encodes (an EPUB's is MP3)."""
        return "mp3" if self.format == "epub" else self.format


@dataclass(frozen=True)
class Tags:
    """What a render's file says about itself: players show these."""

    title: str  # the file's: the book's, or its chapter's in a chapter file
    album: str  # the book's title
    author: str | None = None
    narrator: str | None = None  # the voices' names
    year: int | None = None
    cover: bytes | None = None
    cover_type: str | None = None  # image/jpeg or image/png
    track: tuple[int, int] | None = None  # (number, of how many): a chapter file
    language: str = "en"  # BCP 47, from the voice (a read-along book's dc:language)

    def for_chapter(self, title: str, number: int, total: int) -> Tags:
        """The tags of one chapter's file of this book."""
        return replace(self, title=title, track=(number, total))


def narrator_of(voices: list[str]) -> str:
    """The narrators' names from voice names: a Piper voice (``en_US-joe-medium``) is its
    speaker (``Joe``); others are their own name."""
    names: list[str] = []
    for voice in voices:
        name = voice.split(":")[-1]
        parts = name.split("-")
        if len(parts) == 3 and "_" in parts[0]:
            name = parts[1].replace("_", " ").title()
        if name not in names:
            names.append(name)
    return ", ".join(names)


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
    _spoken_ends: list[int] = field(default_factory=list)

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
        if len(self._spoken_ends) < len(self._starts):
            self._spoken_ends.append(0)
        self._spoken_ends[-1] = self.samples
        return Cue(self.seconds(start), self.seconds(self.samples), text)

    def chapter_of(self, position: int) -> int:
        """The index (in ``chapters()``) of the chapter the item at ``position`` goes into,
        before it is placed."""
        if position in self.chapter_titles or not self._starts:
            return len(self._starts)
        return len(self._starts) - 1

    def chapter_spans(self) -> list[tuple[int, int]]:
        """Each chapter's first sample and the end of its last item (its speech without
        the gap that follows it), in samples."""
        starts = [start for _, start in self._starts] or [0]
        ends = self._spoken_ends or [self.samples]
        return list(zip(starts, ends, strict=True))

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
    """The cue's lines as given, none blank: a blank line would end the cue, and ``-->``
    would start a timing."""
    lines = (_SPACE.sub(" ", line).strip() for line in text.split("\n"))
    return "\n".join(line for line in lines if line).replace("-->", "->")


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


_UNSAFE = re.compile(r'[\x00-\x1f\x7f<>:"/\\|?*]+')
FILE_NAME_MAX = 120


def file_name(title: str, extension: str) -> str:
    """A file name made from a title that every system accepts: no control characters,
    path separators or characters Windows refuses, no leading or trailing dots or
    spaces, at most FILE_NAME_MAX characters before the extension."""
    name = _SPACE.sub(" ", _UNSAFE.sub(" ", title)).strip(" .")[:FILE_NAME_MAX].strip(" .")
    return f"{name or 'render'}.{extension}"
