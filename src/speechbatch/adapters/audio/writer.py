"""Encoding a render's file: MP3 (LAME, after an ID3v2.3 tag with its chapters and cover)
or M4B (AAC in MP4 with a QuickTime chapter track and Nero ``chpl`` chapters, and iTunes
tags), from mono float pieces, through PyAV's bundled FFmpeg libraries.

FFmpeg's MP3 muxer writes a LAME info frame with the encoder's delay and padding, so a
decoder that honours it (FFmpeg, libsndfile, browsers) returns exactly the samples given;
the MP4 muxer does the same with an edit list. Offsets computed from sample counts are
therefore offsets in the decoded file.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO, Self

import av
import numpy as np
from av.audio.stream import AudioStream
from mutagen.mp4 import MP4, MP4Cover

from speechbatch.adapters.audio.id3 import id3_tag
from speechbatch.adapters.audio.pcm import Samples
from speechbatch.domain.renders import ChapterMark, Tags

if TYPE_CHECKING:  # a type of PyAV's stubs only
    from av.container.core import Chapter

_CONTAINERS = {"mp3": ("mp3", "libmp3lame"), "m4b": ("ipod", "aac")}
# The encoders' faster settings: LAME's algorithm quality 7 ("fast", still transparent
# for speech at this bit rate) and FFmpeg AAC's fast coder; each about doubles the speed.
_OPTIONS = {"mp3": {"compression_level": "7"}, "m4b": {"aac_coder": "fast"}}
# The tag is ours (id3.py): FFmpeg's would come first and hold no chapters in order.
_CONTAINER_OPTIONS = {"mp3": {"id3v2_version": "0"}, "m4b": {}}
BIT_RATE = 64_000  # mono speech
_MS = Fraction(1, 1000)


@dataclass(frozen=True)
class Encoding:
    """A file's format, the rate of the PCM given, the file's rate and bit rate."""

    fmt: str
    rate: int
    out_rate: int
    bit_rate: int = BIT_RATE


class _After:
    """A file seen from ``offset`` on: FFmpeg writes the MP3 after the ID3 tag, and its
    seeks (to fill in the info frame at the end) land where it means them to."""

    def __init__(self, file: BinaryIO, offset: int) -> None:
        self._file = file
        self._offset = offset

    def write(self, data: bytes) -> int:
        return self._file.write(data)

    def seek(self, position: int, whence: int = 0) -> int:
        if whence == 0:
            position += self._offset
        return self._file.seek(position, whence) - self._offset

    def tell(self) -> int:
        return self._file.tell() - self._offset

    def flush(self) -> None:
        self._file.flush()


class AudioWriter:
    """Writes one audio file at ``path``; its chapters and tags are fixed up front.

    Use as a context manager: leaving it without an error finishes the file; with an
    error, the file is left to be deleted.
    """

    def __init__(
        self, path: Path, encoding: Encoding, chapters: list[ChapterMark], tags: Tags
    ) -> None:
        container_format, codec = _CONTAINERS[encoding.fmt]
        self.path = path
        self.encoding = encoding
        self.tags = tags
        self._file: BinaryIO | None = None
        target: str | _After = str(path)
        if encoding.fmt == "mp3":
            self._file = path.open("wb")
            tag = id3_tag(tags, chapters)
            self._file.write(tag)
            target = _After(self._file, len(tag))
        self._container = av.open(
            target,
            mode="w",
            format=container_format,
            container_options=_CONTAINER_OPTIONS[encoding.fmt],
        )
        if encoding.fmt == "m4b":
            # The MP4 muxer lays out its chapter track (and chpl) when it writes the header.
            self._container.set_chapters([_mp4_chapter(i, c) for i, c in enumerate(chapters)])
        stream = self._container.add_stream(
            codec, rate=encoding.out_rate, layout="mono", options=_OPTIONS[encoding.fmt]
        )
        assert isinstance(stream, AudioStream)
        self._stream = stream
        self._stream.bit_rate = encoding.bit_rate
        self._resampler = (
            av.AudioResampler(format="fltp", layout="mono", rate=encoding.out_rate)
            if encoding.out_rate != encoding.rate
            else None
        )
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
        if self._pending_samples >= self.encoding.rate:
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
        frame.sample_rate = self.encoding.rate
        frame.pts = self._pts
        self._pts += samples.size
        self._encode(frame)

    def _encode(self, frame: av.AudioFrame | None) -> None:
        frames: list[av.AudioFrame | None] = [frame]
        if self._resampler is not None:
            frames = list(self._resampler.resample(frame))
            if frame is None:
                frames.append(None)
        for each in frames:
            for packet in self._stream.encode(each):
                self._container.mux(packet)

    def silence(self, samples: int) -> None:
        """Encode ``samples`` of silence, a second at a time."""
        while samples > 0:
            n = min(samples, self.encoding.rate)
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
        try:
            if exc_type is None:
                self._flush()
                self._encode(None)
            self._container.close()
        finally:
            if self._file is not None:
                self._file.close()
        if exc_type is None and self.encoding.fmt == "m4b":
            write_mp4_tags(self.path, self.tags)


def _mp4_chapter(index: int, chapter: ChapterMark) -> Chapter:
    return {
        "id": index + 1,
        "start": round(chapter.start_seconds * 1000),
        "end": round(chapter.end_seconds * 1000),
        "time_base": _MS,
        "metadata": {"title": chapter.title},
    }


def write_mp4_tags(path: Path, tags: Tags) -> None:
    """The iTunes tags players read from an M4B (the chapters are the muxer's)."""
    mp4 = MP4(path)
    if mp4.tags is None:
        mp4.add_tags()
    assert mp4.tags is not None
    mp4.tags["\xa9nam"] = [tags.title]
    mp4.tags["\xa9alb"] = [tags.album]
    if tags.author:
        mp4.tags["\xa9ART"] = [tags.author]
        mp4.tags["aART"] = [tags.author]
    if tags.narrator:
        mp4.tags["\xa9wrt"] = [tags.narrator]  # the narrator, as audiobook players read it
    if tags.year:
        mp4.tags["\xa9day"] = [f"{tags.year:04d}"]
    mp4.tags["\xa9gen"] = ["Audiobook"]
    mp4.tags["stik"] = [2]  # media kind: audiobook
    if tags.cover and tags.cover_type:
        kind = MP4Cover.FORMAT_PNG if tags.cover_type == "image/png" else MP4Cover.FORMAT_JPEG
        mp4.tags["covr"] = [MP4Cover(tags.cover, imageformat=kind)]
    mp4.save()
