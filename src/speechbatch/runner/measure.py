"""Measuring a finished item's audio before its finish transaction (never inside one):
its duration and a quality verdict (see ``domain.quality``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speechbatch.adapters.audio.measure import measure
from speechbatch.domain.editing import speed_of
from speechbatch.domain.quality import verdict


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
