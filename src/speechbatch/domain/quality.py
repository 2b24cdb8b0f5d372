"""Quality verdicts on finished audio: silent, too short or too long for its text.

A person reading ordinary text aloud says about 12-16 characters a second (about 150
words a minute); espeak, piper and the HTTP voices land in that range too. The band
below is wide on purpose: a suspect is for a person to listen to, so it flags only
audio far outside what the text's length predicts (text the provider dropped, or a
voice that rambled or looped).
"""

from __future__ import annotations

from dataclasses import dataclass

SILENT = "silent"
TOO_SHORT = "too_short"
TOO_LONG = "too_long"

# Peak level (of full scale) under which audio carries almost no signal.
SILENT_PEAK = 0.01
# Characters a second at speed 1.0 beyond which speech would have to be impossibly fast,
# and under which it is far slower than any reading voice.
MAX_CHARS_PER_SECOND = 40.0
MIN_CHARS_PER_SECOND = 3.0
# Texts this short say too little to judge their length (pauses dominate).
MIN_CHARACTERS_TO_JUDGE = 12
# Leading and trailing silence a voice may add, whatever the text's length.
PADDING_SECONDS = 1.5


@dataclass(frozen=True)
class Measurement:
    """What decoding an audio file tells: its duration and peak level (0..1)."""

    duration_seconds: float
    peak: float


def verdict(measured: Measurement, characters: int, speed: float = 1.0) -> str | None:
    """``silent``, ``too_short``, ``too_long`` or None (nothing to flag) for audio made
    from a spoken text of ``characters`` characters at ``speed``."""
    if measured.peak < SILENT_PEAK:
        return SILENT
    if characters < MIN_CHARACTERS_TO_JUDGE:
        return None
    speed = speed if speed > 0 else 1.0
    shortest = characters / (MAX_CHARS_PER_SECOND * speed)
    longest = characters / (MIN_CHARS_PER_SECOND * speed) + PADDING_SECONDS
    if measured.duration_seconds < shortest:
        return TOO_SHORT
    if measured.duration_seconds > longest:
        return TOO_LONG
    return None
