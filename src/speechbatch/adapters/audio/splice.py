"""Splicing decoded audio as it streams: stretches cut out and silence put in their place
(``domain.paragraphs.Splice``), one piece at a time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from speechbatch.adapters.audio.pcm import Samples
from speechbatch.domain.paragraphs import Splice


def spliced(pieces: Iterable[Samples], splices: Sequence[Splice]) -> Iterator[Samples]:
    """``pieces`` with each splice made: the samples from its start to its end left out
    and its silence put where it starts. A splice past the end of the audio puts its
    silence at the end (as ``domain.paragraphs.spliced_length`` counts it)."""
    if not splices:
        yield from pieces
        return
    yield from (piece for piece in _spliced(pieces, splices) if piece.size)


def _spliced(pieces: Iterable[Samples], splices: Sequence[Splice]) -> Iterator[Samples]:
    at = 0  # samples of the source read so far
    pending = list(splices)
    for piece in pieces:
        end = at + piece.size
        keep_from = 0
        while pending and pending[0].start < end:
            splice = pending[0]
            if splice.start >= at + keep_from:
                yield piece[keep_from : splice.start - at]
                yield np.zeros(splice.silence, dtype=np.float32)
            if splice.end > end:  # the cut goes on into the next piece
                keep_from = piece.size
                pending[0] = Splice(end, splice.end, 0)
                break
            keep_from = max(keep_from, splice.end - at)
            pending.pop(0)
        if keep_from < piece.size:
            yield piece[keep_from:]
        at = end
    for splice in pending:
        yield np.zeros(splice.silence, dtype=np.float32)
