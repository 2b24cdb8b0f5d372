"""Integrated loudness (ITU-R BS.1770-4, as pyloudnorm measures it) of a stream, in pieces.

pyloudnorm's ``Meter`` wants the whole signal in memory. This meter runs the same
K-weighting filters (pyloudnorm's, with their state carried from piece to piece), sums
the filtered energy per 100 ms step, forms the 400 ms blocks (75 % overlap) from the last
four steps, and keeps the blocks' energies in a histogram of 0.01 LU bins instead of a
list: the two gates (absolute -70 LUFS, relative -10 LU) are then applied to bins, so the
memory is constant however long the stream, and the answer within 0.01 LU of the list's.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from pyloudnorm.iirfilter import IIRfilter

ABSOLUTE_GATE = -70.0
RELATIVE_GATE = -10.0
TOP = 10.0  # blocks louder than this (full scale is about +3) share the top bin
BIN = 0.01
_BINS = int((TOP - ABSOLUTE_GATE) / BIN) + 1


def _k_weighting(rate: int) -> list[IIRfilter]:
    """BS.1770's two filter stages, with pyloudnorm's parameters for "K-weighting"."""
    # Imported here: pyloudnorm's filters import scipy.signal, about a second of CPU that
    # only a process that measures loudness (a render) should pay, not every worker boot.
    from pyloudnorm.iirfilter import IIRfilter

    return [
        IIRfilter(4.0, 1 / np.sqrt(2), 1500.0, rate, "high_shelf"),
        IIRfilter(0.0, 0.5, 38.0, rate, "high_pass"),
    ]


def _loudness(mean_square: float) -> float:
    return -0.691 + 10.0 * math.log10(mean_square) if mean_square > 0 else -math.inf


class LoudnessMeter:
    """Feed mono float pieces with ``add``; ``integrated()`` is the gated loudness in LUFS."""

    def __init__(self, rate: int) -> None:
        self.step = round(rate * 0.1)
        self._stages = [(f.b, f.a, f.passband_gain, np.zeros(2)) for f in _k_weighting(rate)]
        self._step_energy = 0.0
        self._step_filled = 0
        self._last_steps: deque[float] = deque(maxlen=4)
        self._energy = np.zeros(_BINS)
        self._count = np.zeros(_BINS, dtype=np.int64)
        self._pending: list[npt.NDArray[np.float32]] = []
        self._pending_samples = 0

    def add(self, samples: npt.NDArray[np.float32]) -> None:
        """Measure the next piece of the stream (gathered into pieces of about a second:
        the filters cost less per call than per sample)."""
        if samples.size == 0:
            return
        self._pending.append(samples)
        self._pending_samples += samples.size
        if self._pending_samples >= 10 * self.step:
            self._measure()

    def _measure(self) -> None:
        if not self._pending:
            return
        import scipy.signal  # loaded by _k_weighting already (see there)

        x = np.concatenate(self._pending).astype(np.float64)
        self._pending = []
        self._pending_samples = 0
        stages = []
        for b, a, gain, state in self._stages:
            x, state = scipy.signal.lfilter(b, a, x, zi=state)
            x = gain * x
            stages.append((b, a, gain, state))
        self._stages = stages
        squares = np.square(x)
        at = 0
        while at < len(squares):
            take = min(self.step - self._step_filled, len(squares) - at)
            self._step_energy += float(squares[at : at + take].sum())
            self._step_filled += take
            at += take
            if self._step_filled == self.step:
                self._end_step()

    def _end_step(self) -> None:
        self._last_steps.append(self._step_energy)
        self._step_energy = 0.0
        self._step_filled = 0
        if len(self._last_steps) == 4:
            mean_square = sum(self._last_steps) / (4 * self.step)
            level = _loudness(mean_square)
            if level >= ABSOLUTE_GATE:
                index = min(int((level - ABSOLUTE_GATE) / BIN), _BINS - 1)
                self._energy[index] += mean_square
                self._count[index] += 1

    def integrated(self) -> float:
        """The integrated loudness so far (LUFS); ``-inf`` for silence."""
        self._measure()
        total = int(self._count.sum())
        if total == 0:
            return -math.inf
        relative = _loudness(float(self._energy.sum()) / total) + RELATIVE_GATE
        first = max(0, math.ceil((relative - ABSOLUTE_GATE) / BIN))
        count = int(self._count[first:].sum())
        if count == 0:
            return -math.inf
        return _loudness(float(self._energy[first:].sum()) / count)


def gain_for(measured_lufs: float, target_lufs: float | None) -> float:
    """The linear gain that brings ``measured_lufs`` to ``target_lufs`` (1 for none/silence)."""
    if target_lufs is None or not math.isfinite(measured_lufs):
        return 1.0
    return float(10 ** ((target_lufs - measured_lufs) / 20))
