"""Pass 2's signal path: each chapter's gain, room tone, the true-peak limiter, and the
files it feeds (the whole book, and one file per chapter when the preset asks for them).

The builder writes the job's audio and gaps in timeline order; sample offsets here are
the timeline's (``domain.renders.Timeline``), so a chapter's gain starts at its first
sample and its file holds its speech from its first sample to the end of its last item,
with room tone before and after. Memory holds a second of audio and the limiter's
window, however long the job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import numpy as np

from speechbatch.adapters.audio.limiter import Limiter
from speechbatch.adapters.audio.pcm import Samples
from speechbatch.adapters.audio.writer import AudioWriter, Encoding
from speechbatch.domain.renders import ChapterMark, Tags


@dataclass(frozen=True)
class MasterPlan:
    """What pass 2 does: measured in pass 1, decided by the preset."""

    encoding: Encoding
    chapters: list[ChapterMark]
    spans: list[tuple[int, int]]  # each chapter's first sample and its speech's end
    gains: list[float]  # linear, per chapter
    ceiling_db: float
    tags: Tags
    room_tone_db: float | None = None
    chapter_files: list[Path] = field(default_factory=list)  # empty: none
    head_samples: int = 0  # room tone before a chapter file's speech
    tail_samples: int = 0


class Master:
    """Feed the job's samples in order with ``write`` and ``silence``; leaving the
    context finishes every file."""

    def __init__(self, plan: MasterPlan, book: Path) -> None:
        self.plan = plan
        rate = plan.encoding.rate
        self._book = AudioWriter(book, plan.encoding, plan.chapters, plan.tags)
        self._limiter = Limiter(rate, plan.ceiling_db)
        self._tone = None if plan.room_tone_db is None else 10 ** (plan.room_tone_db / 20)
        self._noise = np.random.default_rng(0)  # the same room tone in every render
        self._in = 0  # samples written (the timeline's offset)
        self._out = 0  # samples out of the limiter
        self._chapter = 0
        self._starts = [start for start, _ in plan.spans[1:]]
        self._pending: list[Samples] = []
        self._pending_samples = 0
        self._file: AudioWriter | None = None
        self._file_number = 0

    def write(self, samples: Samples) -> None:
        """The next piece of the job, before gain."""
        while samples.size:
            # Up to where the next chapter (and its gain) begins.
            end = self._starts[self._chapter] if self._chapter < len(self._starts) else None
            take = samples.size if end is None else min(samples.size, end - self._in)
            if take <= 0:
                self._chapter += 1
                continue
            self._pending.append(samples[:take] * self.plan.gains[self._chapter])
            self._pending_samples += take
            self._in += take
            samples = samples[take:]
        if self._pending_samples >= self.plan.encoding.rate:
            self._limit()

    def silence(self, samples: int) -> None:
        """``samples`` of silence (a gap)."""
        rate = self.plan.encoding.rate
        while samples > 0:
            n = min(samples, rate)
            self.write(np.zeros(n, dtype=np.float32))
            samples -= n

    def _room_tone(self, samples: int) -> Samples:
        if self._tone is None:
            return np.zeros(samples, dtype=np.float32)
        return (self._noise.standard_normal(samples) * self._tone).astype(np.float32)

    def _limit(self, *, last: bool = False) -> None:
        block = np.concatenate(self._pending) if self._pending else np.zeros(0, np.float32)
        self._pending, self._pending_samples = [], 0
        if self._tone is not None:
            block = block + self._room_tone(block.size)
        out = self._limiter.process(block)
        if last:
            out = np.concatenate([out, self._limiter.flush()])
        self._book.write(out)
        if self.plan.chapter_files:
            self._route(out)
        self._out += out.size

    def _route(self, out: Samples) -> None:
        """Each chapter's speech into its own file, between room tone."""
        at = self._out
        while out.size and self._file_number < len(self.plan.spans):
            start, end = self.plan.spans[self._file_number]
            if at + out.size <= start:
                return
            if self._file is None:
                skip = max(0, start - at)
                out, at = out[skip:], at + skip
                self._open_chapter_file()
            assert self._file is not None
            take = min(out.size, end - at)
            self._file.write(out[:take])
            out, at = out[take:], at + take
            if at >= end:
                self._close_chapter_file()

    def _open_chapter_file(self) -> None:
        number = self._file_number
        chapter = self.plan.chapters[number]
        tags = self.plan.tags.for_chapter(chapter.title, number + 1, len(self.plan.chapters))
        path = self.plan.chapter_files[number]
        self._file = AudioWriter(path, self.plan.encoding, [], tags)
        self._file.write(self._room_tone(self.plan.head_samples))

    def _close_chapter_file(self) -> None:
        assert self._file is not None
        self._file.write(self._room_tone(self.plan.tail_samples))
        self._file.__exit__(None, None, None)
        self._file = None
        self._file_number += 1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._abort(exc_type, exc, tb)
            return
        try:
            self._limit(last=True)
            if self._file is not None:
                self._close_chapter_file()
        except BaseException as error:
            self._abort(type(error), error, error.__traceback__)
            raise
        self._book.__exit__(None, None, None)

    def _abort(
        self, exc_type: type[BaseException], exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close the files unfinished (they are deleted with the work folder)."""
        if self._file is not None:
            self._file.__exit__(exc_type, exc, tb)
        self._book.__exit__(exc_type, exc, tb)
