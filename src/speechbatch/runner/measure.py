"""Measuring a finished item's audio before its finish transaction (never inside one):
its duration, a quality verdict (see ``domain.quality``) and its timing (see
``domain.timing``: the provider's when it gave some, else measured from the audio)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speechbatch.adapters.audio.measure import measure
from speechbatch.adapters.audio.timing import measure_timing
from speechbatch.domain.editing import speed_of
from speechbatch.domain.quality import verdict
from speechbatch.domain.timing import Timing, provided_timing

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Measured:
    """What the finish records of the audio: its duration and its verdict (None: fine
    or not decodable)."""

    duration_seconds: float | None = None
    suspect: str | None = None


def measure_audio(audio: bytes, spoken_text: str, options: Mapping[str, Any]) -> Measured:
    """Decode ``audio`` and judge it against the length of the text it speaks at the
    job's speed; audio that cannot be decoded is recorded without a measurement."""
    measured = measure(audio)
    if measured is None:
        return Measured()
    suspect = verdict(measured, len(spoken_text), speed_of(options))
    return Measured(round(measured.duration_seconds, 3), suspect)


def time_take(
    audio: bytes, spoken_text: str, voice: str, provided: Sequence[Mapping[str, Any]] | None
) -> str | None:
    """The take's timing as stored (JSON): the provider's words as it gave them; else
    measured from the audio, by word where it can, else the provider's sentences (Piper's),
    else by sentence; None when nothing can say (a failure to measure never fails the
    item)."""
    timing: Timing | None = provided_timing(provided, spoken_text) if provided else None
    if timing is None or timing.words is None:
        try:
            timing = measure_timing(audio, spoken_text, voice, timing)
        except Exception:  # a take without timing is still a take
            log.exception("could not measure the timing of a take")
    return None if timing is None else json.dumps(timing.as_json(), separators=(",", ":"))
