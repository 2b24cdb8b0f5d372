"""The check's measurements: a render's files decoded as a player decodes them, and the
figures the presets judge (``domain.presets.check_report``), in one streaming pass per
file."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from speechbatch.adapters.audio.levels import LevelMeter
from speechbatch.adapters.audio.loudness import LoudnessMeter
from speechbatch.adapters.audio.pcm import Samples, decode
from speechbatch.adapters.audio.peaks import TruePeakMeter
from speechbatch.domain.presets import Figures


class FileMeter:
    """Every figure of one stream: loudness, true peak, RMS, noise floor, room tone."""

    def __init__(self, rate: int, *, loudness: bool = True, peak: bool = True) -> None:
        self._loudness = LoudnessMeter(rate) if loudness else None
        self._peak = TruePeakMeter() if peak else None
        self._levels = LevelMeter(rate)

    def add(self, samples: Samples) -> None:
        """Measure the next piece."""
        if self._loudness is not None:
            self._loudness.add(samples)
        if self._peak is not None:
            self._peak.add(samples)
        self._levels.add(samples)

    def figures(self, true_peak: float | None = None) -> Figures:
        """What was measured (the true peak given, when this meter measured none)."""
        levels = self._levels
        return Figures(
            seconds=levels.seconds,
            integrated_lufs=self._loudness.integrated() if self._loudness else float("nan"),
            true_peak_dbtp=self._peak.dbtp() if self._peak else float(true_peak or -math.inf),
            rms_db=levels.rms_db(),
            noise_floor_db=levels.noise_floor_db(),
            head_seconds=levels.head(),
            tail_seconds=levels.tail(),
        )


def _seconds(pieces: Iterator[Samples], rate: int, tick: Callable[[], None]) -> Iterator[Samples]:
    """The decoder's pieces (an MP3 frame: 576 or 1152 samples) gathered into about a
    second each (the meters cost less per call than per sample), ``tick`` between them."""
    gathered: list[Samples] = []
    size = 0
    for piece in pieces:
        tick()
        gathered.append(piece)
        size += piece.size
        if size >= rate:
            yield np.concatenate(gathered)
            gathered, size = [], 0
    if gathered:
        yield np.concatenate(gathered)


def measure_file(
    path: Path,
    rate: int,
    spans: Sequence[tuple[float, float]] = (),
    tick: Callable[[], None] = lambda: None,
) -> tuple[Figures, list[Figures]]:
    """The file's figures, and each span's of it: (from, to) in seconds, one after the
    other from the start. ``tick`` is called between pieces (a builder renews its lease)."""
    # With spans, the file's true peak is the loudest span's: measured once, not twice.
    whole = FileMeter(rate, peak=not spans)
    bounds = [(round(start * rate), round(end * rate)) for start, end in spans]
    meters = [FileMeter(rate, loudness=False) for _ in bounds]
    at = 0
    span = 0
    with path.open("rb") as source:
        for piece in _seconds(decode(source, rate), rate, tick):
            whole.add(piece)
            offset = 0
            while span < len(bounds) and offset < piece.size:
                end = bounds[span][1]  # each span starts where the one before it ends
                take = min(piece.size - offset, max(0, end - (at + offset)))
                meters[span].add(piece[offset : offset + take])
                offset += take
                if at + offset >= end:
                    span += 1
            at += piece.size
    parts = [meter.figures() for meter in meters]
    peak = max((part.true_peak_dbtp for part in parts), default=None)
    return whole.figures(peak), parts
