"""Measuring finished audio: its duration and peak level, decoded with PyAV (the same
decoder as renders; FFmpeg's libraries come in its wheel)."""

from __future__ import annotations

import io
import logging

import av
import numpy as np

from speechbatch.adapters.audio.pcm import RATE, decode
from speechbatch.domain.quality import Measurement

log = logging.getLogger(__name__)


def measure(audio: bytes) -> Measurement | None:
    """The audio's duration and peak level, or None when it cannot be decoded."""
    frames, peak = 0, 0.0
    try:
        for piece in decode(io.BytesIO(audio)):
            frames += len(piece)
            if len(piece):
                peak = max(peak, float(np.abs(piece).max()))
    except (av.FFmpegError, IndexError, ValueError) as exc:
        log.warning("could not decode audio to measure it: %s", exc)
        return None
    if frames == 0:
        return None
    return Measurement(duration_seconds=frames / RATE, peak=peak)
