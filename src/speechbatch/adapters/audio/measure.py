"""Decoding finished audio to measure it (``soundfile``'s libsndfile decodes MP3, WAV, OGG)."""

from __future__ import annotations

import io
import logging
import threading

import soundfile

from speechbatch.domain.quality import Measurement

log = logging.getLogger(__name__)

# Frames decoded at a time: a long item never needs its whole PCM in memory.
_BLOCK = 65536
# libsndfile decodes MP3 through mpg123, whose state is partly process-wide: one decode
# at a time per process (a few milliseconds per second of audio, beside a provider call
# of seconds).
_lock = threading.Lock()


def measure(audio: bytes) -> Measurement | None:
    """The audio's duration and peak level, or None when it cannot be decoded."""
    try:
        with _lock, soundfile.SoundFile(io.BytesIO(audio)) as sound:
            rate = sound.samplerate
            frames = 0
            peak = 0.0
            for block in sound.blocks(blocksize=_BLOCK, dtype="float32", always_2d=True):
                frames += len(block)
                if len(block):
                    peak = max(peak, float(abs(block).max()))
    except (soundfile.LibsndfileError, RuntimeError, ValueError) as exc:
        log.warning("could not decode audio to measure it: %s", exc)
        return None
    if rate <= 0:
        return None
    return Measurement(duration_seconds=frames / rate, peak=peak)
