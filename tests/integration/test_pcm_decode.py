"""Decoding item audio for renders: MP3 at the render's rate skips the resampler and gives
the same samples as through it; other formats and rates still go through it."""

from __future__ import annotations

import io

import av
import numpy as np
import soundfile

from speechbatch.adapters.audio.pcm import RATE, decode
from tests.support.render_audio import encode_mp3


def _through_resampler(data: bytes) -> np.ndarray:
    """Every frame through FFmpeg's resampler, as decode did before the direct path."""
    pieces = []
    with av.open(io.BytesIO(data), mode="r") as container:
        resampler = av.AudioResampler(format="flt", layout="mono", rate=RATE)
        for frame in container.decode(container.streams.audio[0]):
            pieces += [out.to_ndarray()[0].copy() for out in resampler.resample(frame)]
        pieces += [out.to_ndarray()[0].copy() for out in resampler.resample(None)]
    return np.concatenate(pieces)


def test_mp3_at_the_render_rate_decodes_to_the_resamplers_samples() -> None:
    t = np.arange(int(1.3 * RATE)) / RATE
    data = encode_mp3((0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32))
    direct = np.concatenate(list(decode(io.BytesIO(data))))
    assert direct.dtype == np.float32 and direct.size == t.size  # gapless: exactly
    assert np.array_equal(direct, _through_resampler(data))


def test_other_rates_and_formats_are_converted() -> None:
    t = np.arange(44100) / 44100
    out = io.BytesIO()
    soundfile.write(out, 0.3 * np.sin(2 * np.pi * 330 * t), 44100, format="WAV", subtype="PCM_16")
    samples = np.concatenate(list(decode(io.BytesIO(out.getvalue()))))
    assert abs(samples.size - RATE) <= 64  # one second, now at 22,050 Hz
    assert 0.28 < float(np.abs(samples).max()) < 0.32
