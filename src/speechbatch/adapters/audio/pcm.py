"""Decoding any audio file PyAV reads (MP3, WAV, OGG, ...) into mono float32 pieces."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import BinaryIO

import av
import numpy as np
import numpy.typing as npt

# The rate every render is made at: the offline voices' own (espeak and Piper speak at
# 22,050 Hz), so their audio is never resampled; other rates are converted on decode.
RATE = 22050

Samples = npt.NDArray[np.float32]


def decode(source: BinaryIO, rate: int = RATE) -> Iterator[Samples]:
    """The first audio stream of ``source`` as mono float32 pieces at ``rate``.

    One decoded frame at a time: a long file is never held whole. A source that cannot
    seek (an object store's stream) is read into memory first (one item's audio): without
    seeking the decoder cannot read an MP3's gapless info and keeps the encoder's padding.
    """
    seekable = getattr(source, "seekable", None)
    if seekable is None or not seekable():
        source = io.BytesIO(source.read())
    with av.open(source, mode="r") as container:
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
        direct: bool | None = None
        for frame in container.decode(stream):
            if direct is None:
                # Mono float at the render's rate (MP3 decodes to it) needs no conversion:
                # the resampler's calls were a sixth of a render. Decided once per stream,
                # so the resampler never sees half of it.
                direct = _is_mono_float(frame, rate)
            if direct:
                yield _mono(frame)
                continue
            for out in resampler.resample(frame):
                yield _mono(out)
        if not direct:
            for out in resampler.resample(None):
                yield _mono(out)


def _is_mono_float(frame: av.AudioFrame, rate: int) -> bool:
    """The frame is mono float32 samples at ``rate`` (planar or packed: one plane)."""
    return (
        frame.format.name in ("flt", "fltp")
        and len(frame.layout.channels) == 1
        and frame.sample_rate == rate
    )


def _mono(frame: av.AudioFrame) -> Samples:
    """A mono float frame's samples (a copy: PyAV reuses its buffers)."""
    return np.array(frame.to_ndarray()[0], dtype=np.float32)
