"""Encoding a render: MP3 (LAME, with ID3v2 CHAP/CTOC chapters) or M4B (AAC in MP4 with
MP4 chapters), from mono float pieces, through PyAV's bundled FFmpeg libraries.

FFmpeg's MP3 muxer writes a LAME info frame with the encoder's delay and padding, so a
decoder that honours it (FFmpeg, libsndfile, browsers) returns exactly the samples given;
the MP4 muxer does the same with an edit list. Offsets computed from sample counts are
therefore offsets in the decoded file.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Self

import av
import numpy as np
from av.audio.stream import AudioStream
from mutagen.id3 import CHAP, CTOC, ID3, TIT2, CTOCFlags

from speechbatch.adapters.audio.pcm import Samples
from speechbatch.domain.renders import ChapterMark

_CONTAINERS = {"mp3": ("mp3", "libmp3lame"), "m4b": ("ipod", "aac")}
# The encoders' faster settings: LAME's algorithm quality 7 ("fast", still transparent
# for speech at this bit rate) and FFmpeg AAC's fast coder; each about doubles the speed.
_OPTIONS = {"mp3": {"compression_level": "7"}, "m4b": {"aac_coder": "fast"}}
BIT_RATE = 64_000  # mono speech
_MS = Fraction(1, 1000)
_NO_OFFSET = 0xFFFFFFFF  # ID3 CHAP: "use the times, not byte offsets"


class AudioWriter:
    """Writes one audio file of ``fmt`` at ``path``; its chapters are fixed up front.

    Use as a context manager: leaving it without an error finishes the file (and, for
    MP3, writes the chapter frames); with an error, the file is left to be deleted.
    """

    def __init__(self, path: Path, fmt: str, rate: int, chapters: list[ChapterMark]) -> None:
        container_format, codec = _CONTAINERS[fmt]
        self.path = path
        self.fmt = fmt
        self.rate = rate
        self.chapters = chapters
        self._container = av.open(str(path), mode="w", format=container_format)
        if fmt == "m4b":
            # The MP4 muxer lays out its chapter track when it writes the header.
            self._container.set_chapters(
                [
                    {
                        "id": i + 1,
                        "start": round(c.start_seconds * 1000),
                        "end": round(c.end_seconds * 1000),
                        "time_base": _MS,
                        "metadata": {"title": c.title},
                    }
                    for i, c in enumerate(chapters)
                ]
            )
        stream = self._container.add_stream(codec, rate=rate, layout="mono", options=_OPTIONS[fmt])
        assert isinstance(stream, AudioStream)
        self._stream = stream
        self._stream.bit_rate = BIT_RATE
        self._pts = 0
        self._pending: list[Samples] = []
        self._pending_samples = 0

    def write(self, samples: Samples) -> None:
        """Encode the next piece (gathered into pieces of a second: a frame per decoded
        frame would cost more in calls than in encoding)."""
        if samples.size == 0:
            return
        self._pending.append(samples)
        self._pending_samples += samples.size
        if self._pending_samples >= self.rate:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        samples = np.concatenate(self._pending)
        self._pending = []
        self._pending_samples = 0
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(samples, dtype=np.float32).reshape(1, -1),
            format="fltp",
            layout="mono",
        )
        frame.sample_rate = self.rate
        frame.pts = self._pts
        self._pts += samples.size
        for packet in self._stream.encode(frame):
            self._container.mux(packet)

    def silence(self, samples: int) -> None:
        """Encode ``samples`` of silence, a second at a time."""
        while samples > 0:
            n = min(samples, self.rate)
            self.write(np.zeros(n, dtype=np.float32))
            samples -= n

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._container.close()
            return
        self._flush()
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        if self.fmt == "mp3":
            write_id3_chapters(self.path, self.chapters)


def write_id3_chapters(path: Path, chapters: list[ChapterMark]) -> None:
    """Add ID3v2 chapter frames (one ``CHAP`` each, under one ordered top-level ``CTOC``)."""
    tags = ID3(path)
    ids = [f"chp{i}" for i in range(len(chapters))]
    tags.add(
        CTOC(
            element_id="toc",
            flags=CTOCFlags.TOP_LEVEL | CTOCFlags.ORDERED,
            child_element_ids=ids,
            sub_frames=[TIT2(text=["Chapters"])],
        )
    )
    for element_id, chapter in zip(ids, chapters, strict=True):
        tags.add(
            CHAP(
                element_id=element_id,
                start_time=round(chapter.start_seconds * 1000),
                end_time=round(chapter.end_seconds * 1000),
                start_offset=_NO_OFFSET,
                end_offset=_NO_OFFSET,
                sub_frames=[TIT2(text=[chapter.title])],
            )
        )
    tags.save(path)
