"""Levels of a decoded file, in pieces: RMS, noise floor, and the room tone at its ends.

- RMS: of every sample (dBFS, so a full-scale sine reads -3 dB), as ACX measures a file.
- Noise floor: the RMS of the quietest half second (on a 50 ms grid), as ACX's check
  reads it: the level of the room tone between the words.
- Head and tail: how long the file stays below ``SOUND_DB`` (in 10 ms windows) at its
  start and at its end: the room tone a file begins and ends with.
"""

from __future__ import annotations

import math

import numpy as np

from speechbatch.adapters.audio.peaks import Samples

SOUND_DB = -50.0  # a 10 ms window louder than this is sound, not room tone
WINDOW_SECONDS = 0.01
FLOOR_STEPS = 50  # windows in the half second of the noise floor
_FLOOR_GRID = 5  # the noise floor's half second starts every 5 windows (50 ms)


class LevelMeter:
    """Feed mono pieces with ``add``; then read ``rms_db``, ``noise_floor_db``, ``head``,
    ``tail`` and ``seconds``."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.window = max(1, round(rate * WINDOW_SECONDS))
        self._sound = 10 ** (SOUND_DB / 10) * self.window  # energy of a window at SOUND_DB
        self._energy = 0.0
        self._samples = 0
        self._partial = np.zeros(0, dtype=np.float64)
        self._windows = 0
        self._first_sound: int | None = None
        self._last_sound: int | None = None
        self._recent = np.zeros(0, dtype=np.float64)  # the last windows' energies
        self._floor = math.inf

    def add(self, samples: Samples) -> None:
        """Measure the next piece."""
        if samples.size == 0:
            return
        x = samples.astype(np.float64)
        # Not np.dot: BLAS's threads cost tens of ms a call on a busy machine.
        self._energy += float(np.square(x).sum())
        self._samples += x.size
        x = np.concatenate([self._partial, x])
        whole = len(x) // self.window * self.window
        self._partial = x[whole:]
        energies = np.square(x[:whole]).reshape(-1, self.window).sum(axis=1)
        loud = np.flatnonzero(energies > self._sound)
        if loud.size:
            if self._first_sound is None:
                self._first_sound = self._windows + int(loud[0])
            self._last_sound = self._windows + int(loud[-1])
        self._track_floor(energies)
        self._windows += len(energies)

    def _track_floor(self, energies: np.ndarray) -> None:
        """The quietest half second so far: sums of FLOOR_STEPS windows, on the grid."""
        joined = np.concatenate([self._recent, energies])
        self._recent = joined[-(FLOOR_STEPS - 1) :]
        if len(joined) < FLOOR_STEPS:
            return
        sums = np.cumsum(np.concatenate([[0.0], joined]))
        halves = sums[FLOOR_STEPS:] - sums[: len(sums) - FLOOR_STEPS]
        # How many windows of the stream end with halves[0] (each later one, one more).
        first_end = self._windows - (len(joined) - len(energies)) + FLOOR_STEPS
        on_grid = (first_end + np.arange(len(halves))) % _FLOOR_GRID == 0
        if on_grid.any():
            self._floor = min(self._floor, float(halves[on_grid].min()))

    @property
    def seconds(self) -> float:
        """The length measured."""
        return self._samples / self.rate

    def rms_db(self) -> float:
        """The RMS of every sample, in dB (``-inf`` for silence)."""
        if self._samples == 0 or self._energy <= 0:
            return -math.inf
        return 10 * math.log10(self._energy / self._samples)

    def noise_floor_db(self) -> float:
        """The RMS of the quietest half second (of the whole file when shorter)."""
        floor = self._floor
        span = FLOOR_STEPS * self.window
        if not math.isfinite(floor):
            floor, span = self._energy, max(self._samples, 1)
        return 10 * math.log10(floor / span) if floor > 0 else -math.inf

    def head(self) -> float:
        """Seconds before the first sound (the whole length when there is none)."""
        if self._first_sound is None:
            return self.seconds
        return self._first_sound * self.window / self.rate

    def tail(self) -> float:
        """Seconds after the last sound (the whole length when there is none)."""
        if self._last_sound is None:
            return self.seconds
        return max(0.0, self.seconds - (self._last_sound + 1) * self.window / self.rate)
