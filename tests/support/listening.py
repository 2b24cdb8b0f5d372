"""Hearing audio in tests: decode an MP3 and let pocketsphinx's US English model listen."""

from __future__ import annotations

import io
import re

import numpy as np
import soundfile
from pocketsphinx import Decoder

RECOGNIZER_RATE = 16000


def decode_mp3(data: bytes) -> tuple[np.ndarray, int]:
    """Mono int16 samples of an MP3 and its sample rate (libsndfile, bundled)."""
    samples, rate = soundfile.read(io.BytesIO(data), dtype="int16")
    return np.asarray(samples), int(rate)


def transcribe(samples: np.ndarray, rate: int) -> str:
    """What pocketsphinx hears in mono int16 ``samples`` (resampled to 16 kHz)."""
    x = samples.astype(np.float32)
    n = int(len(x) * RECOGNIZER_RATE / rate)
    resampled = np.interp(np.arange(n) * rate / RECOGNIZER_RATE, np.arange(len(x)), x)
    decoder = Decoder()
    decoder.start_utt()
    decoder.process_raw(resampled.astype("<i2").tobytes(), full_utt=True)
    decoder.end_utt()
    hypothesis = decoder.hyp()
    return hypothesis.hypstr if hypothesis is not None else ""


def recall(expected: str, heard: str) -> float:
    """The share of the expected words that were heard (each heard word counts once)."""
    words = re.findall(r"[a-z']+", expected.lower())
    pool = re.findall(r"[a-z']+", heard.lower())
    found = 0
    for word in words:
        if word in pool:
            pool.remove(word)
            found += 1
    return found / len(words)
