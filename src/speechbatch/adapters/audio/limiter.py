"""A look-ahead true-peak limiter, in pieces, with memory that does not grow.

The gain (in dB) that keeps each sample's true peak (``peaks.peak_envelope``) at the
ceiling is held over ``hold`` before and ``lookahead`` after it (a voice's lowest
fundamental lasts about 10 ms: a shorter hold would follow each cycle and distort it),
smoothed over the look-ahead so that it is already down when the peak comes, and
allowed to recover only at ``release`` dB a second, so speech does not pump. The output
is the input delayed by ``future`` samples; ``flush`` gives the rest.
"""

from __future__ import annotations

import numpy as np

from speechbatch.adapters.audio.peaks import CONTEXT, Samples, bound, peak_envelope

LOOKAHEAD_SECONDS = 0.005
HOLD_SECONDS = 0.02
RELEASE_DB_PER_SECOND = 30.0
_TINY = 1e-12


def window_min(values: np.ndarray, before: int, after: int) -> np.ndarray:
    """``out[i] = min(values[i : i + before + after + 1])``: the minimum over
    ``[n - before, n + after]`` for ``n = i + before`` (valid positions only)."""
    # Imported here, as peaks.py does scipy: a process that never limits does not pay it.
    import scipy.ndimage

    size = before + after + 1
    centred = scipy.ndimage.minimum_filter1d(values, size=size, mode="nearest")
    # minimum_filter1d's window at j is [j - size // 2, j - size // 2 + size - 1].
    first = size // 2
    return centred[first : len(values) - (size - 1 - first)]


class Limiter:
    """Holds the true peak of what passes through at ``ceiling_db`` (dBTP)."""

    def __init__(self, rate: int, ceiling_db: float) -> None:
        self.lookahead = max(1, round(rate * LOOKAHEAD_SECONDS))
        self.hold = round(rate * HOLD_SECONDS)
        self.release = RELEASE_DB_PER_SECOND / rate
        self.ceiling = 10 ** (ceiling_db / 20)
        # The gain is at its lowest CONTEXT samples before a peak: a peak between two
        # samples is made of its neighbours, each of which must have been turned down.
        self.reach = self.lookahead + CONTEXT
        self.future = self.reach + CONTEXT
        self.past = self.lookahead + self.hold + 2 * CONTEXT
        # Already output (context), then pending; silence before the stream.
        self._buffer = np.zeros(self.past, dtype=np.float32)
        self._gain_db = 0.0

    def process(self, samples: Samples) -> Samples:
        """Take the next piece; the limited samples that are ready (``future`` behind)."""
        buffer = np.concatenate([self._buffer, samples.astype(np.float32, copy=False)])
        ready = len(buffer) - self.past - self.future
        if ready <= 0:
            self._buffer = buffer
            return np.zeros(0, dtype=np.float32)
        if self._gain_db == 0.0 and float(np.abs(buffer).max()) * bound() <= self.ceiling:
            # Nothing here can reach the ceiling, and no release is under way.
            out = buffer[self.past : self.past + ready].copy()
            self._buffer = buffer[ready:]
            return out
        envelope = peak_envelope(buffer, self.ceiling)
        needed = np.minimum(0.0, 20 * np.log10(self.ceiling / np.maximum(envelope, _TINY)))
        # held[i] covers the samples from hold before to reach after position
        # i + hold; start where the smoothing of the first ready sample needs it.
        start = self.past - self.lookahead - self.hold
        held = window_min(needed[start:], self.hold, self.reach)[: ready + self.lookahead]
        # The mean of the look-ahead + 1 held values up to each sample: a ramp that ends
        # at or below every peak it leads to.
        sums = np.concatenate([[0.0], np.cumsum(held)])
        width = self.lookahead + 1
        smooth = (sums[width : width + ready] - sums[:ready]) / width
        # Recover at most ``release`` dB a sample: gain[k] = min over j <= k of
        # smooth[j] + (k - j) * release, and the last output's gain carried in.
        steps = np.arange(ready) * self.release
        gain_db = steps + np.minimum(
            self._gain_db + self.release, np.minimum.accumulate(smooth - steps)
        )
        self._gain_db = float(gain_db[-1])
        out = buffer[self.past : self.past + ready] * np.power(10.0, gain_db / 20)
        self._buffer = buffer[ready:]
        return out.astype(np.float32)

    def flush(self) -> Samples:
        """The samples still held back (the stream ends in silence)."""
        return self.process(np.zeros(self.future, dtype=np.float32))
