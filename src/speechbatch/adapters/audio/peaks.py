"""True peak (ITU-R BS.1770-4, Annex 2): the signal's level between its samples, found by
oversampling, for the limiter (which holds it down) and the check (which reports it).

A sample peak misses what a decoder's or a DAC's reconstruction shows between two
samples (up to 3 dB more on speech's sibilants). Four times, with 12 taps a phase, as
the standard's filter: where content reaches the top of the band, filters of other
lengths read a peak up to 0.25 dB apart (scipy's polyphase resampling does), which the
limiter's margin (``domain.presets.ENCODER_MARGIN_DB``) covers.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

UP = 4
TAPS_PER_PHASE = 12
# Input samples of context an output needs on either side.
CONTEXT = TAPS_PER_PHASE // 2 + 1

Samples = npt.NDArray[np.float32]


@dataclass(frozen=True)
class _Design:
    """The oversampling filter and what the envelope reads of it."""

    # The UP outputs within half a sample of an input, as (input offset q, phase k).
    near: list[tuple[int, int]]
    shift: int
    window: int
    phases32: list[npt.NDArray[np.float32]]
    taps: npt.NDArray[np.float64]
    # No reconstructed value exceeds the largest sample times this (the largest sum of one
    # phase's absolute taps): a piece whose sample peak is that far below what matters
    # needs no oversampling.
    bound: float


@functools.cache
def _design() -> _Design:
    # scipy (here and in peak_envelope) is imported where it is used: scipy.signal costs
    # about a second of CPU to import (it pulls in scipy.stats), which only a process that
    # measures a true peak should pay, not every web worker and CLI run that boots.
    import scipy.signal

    # Gain UP: zero-stuffing spreads each sample's energy over UP outputs.
    fir = UP * scipy.signal.firwin(UP * TAPS_PER_PHASE, 1 / UP, window=("kaiser", 6.0))
    # Output m is at input time (m - delay) / UP (the filter is symmetric): the outputs
    # within half a sample of input n start at UP * n + first.
    first = math.ceil((len(fir) - 1) / 2 - UP / 2)
    # Each output m = UP * q + k is phase k's filter over x[q - 11 .. q]; the UP outputs
    # near input n are at q = n + first // UP (+1 once the phase wraps), phases from
    # first % UP.
    near = [divmod(first + j, UP) for j in range(UP)]
    # Each of them as taps over the window x[n - TAPS_PER_PHASE + 1 + shift .. n + shift]:
    # one matrix of (window position, near output), reversed for a window read forwards.
    shift = max(q for q, _ in near)
    window = TAPS_PER_PHASE + shift
    taps = np.zeros((window, UP))
    for j, (q, k) in enumerate(near):
        taps[q : q + TAPS_PER_PHASE, j] = fir[k::UP][::-1]
    return _Design(
        near=near,
        shift=shift,
        window=window,
        phases32=[fir[k::UP].astype(np.float32) for k in range(UP)],
        taps=taps,
        bound=float(max(np.abs(fir[phase::UP]).sum() for phase in range(UP))),
    )


def bound() -> float:
    """No reconstructed value exceeds the largest sample times this: a piece whose sample
    peak times it stays at or under a level cannot reach that level between samples."""
    return _design().bound


def peak_envelope(x: npt.NDArray[np.floating], floor: float = 0.0) -> npt.NDArray[np.float64]:
    """Per input sample, the largest magnitude of the reconstructed signal within half a
    sample of it (at least the sample's own), wherever that may exceed ``floor``;
    elsewhere the sample's own magnitude (both are at most ``floor`` there). Only the
    samples near enough to a loud one are oversampled: speech is loud in few places. The
    first and last ``CONTEXT`` values see the signal as silent beyond ``x``."""
    magnitude = np.abs(x).astype(np.float64)
    if magnitude.size == 0:
        return magnitude
    import scipy.ndimage  # see _design

    design = _design()
    loud_near = scipy.ndimage.maximum_filter1d(magnitude, size=2 * CONTEXT + 1)
    candidates = np.flatnonzero(loud_near * design.bound > floor)
    if candidates.size == 0:
        return magnitude
    signal = x.astype(np.float64)
    if candidates.size > len(x) // 4:
        # Loud almost everywhere: each phase's filter over the whole piece is cheaper, in
        # float32 (half the time of float64; a peak to a millionth is plenty).
        single = x.astype(np.float32)
        phases = [np.convolve(single, design.phases32[k]) for k in range(UP)]
        near = np.max([np.abs(phases[k][q : q + len(x)]) for q, k in design.near], axis=0)
        return np.maximum(near, magnitude)
    padded = np.concatenate([np.zeros(TAPS_PER_PHASE - 1), signal, np.zeros(design.shift + 1)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, design.window)[candidates]
    # einsum's own loop, not BLAS (whose threads cost more than this on a busy machine).
    near = np.abs(np.einsum("ij,jk->ik", windows, design.taps)).max(axis=1)
    magnitude[candidates] = np.maximum(near, magnitude[candidates])
    return magnitude


def to_db(linear: float) -> float:
    """A linear magnitude in dB (``-inf`` for zero)."""
    return 20 * math.log10(linear) if linear > 0 else -math.inf


class TruePeakMeter:
    """Feed mono pieces with ``add``; ``dbtp()`` is the true peak so far.

    Each call measures the samples whose context on both sides it has: it keeps the
    stream's last ``2 * CONTEXT`` samples, of which the last ``CONTEXT`` still wait for
    what follows them (silence, at the end). Silence comes before the stream too.
    """

    def __init__(self) -> None:
        self._tail = np.zeros(2 * CONTEXT, dtype=np.float32)
        self._peak = 0.0

    def add(self, samples: Samples) -> None:
        """Measure the next piece."""
        if samples.size == 0:
            return
        x = np.concatenate([self._tail, samples])
        if float(np.abs(x).max()) * bound() > self._peak:
            envelope = peak_envelope(x, self._peak)
            self._peak = max(self._peak, float(envelope[CONTEXT:-CONTEXT].max()))
        self._tail = x[-2 * CONTEXT :]

    def dbtp(self) -> float:
        """The true peak in dBTP (``-inf`` for silence)."""
        x = np.concatenate([self._tail, np.zeros(CONTEXT, np.float32)])
        return to_db(max(self._peak, float(peak_envelope(x)[CONTEXT:].max())))
