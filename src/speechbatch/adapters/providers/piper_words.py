"""Each word's place in Piper's speech, from the voice model's own phoneme durations.

A Piper voice decides how many samples each phoneme lasts before it makes the audio;
Piper's ``patch_voice_with_alignment`` exposes those durations as a second output of the
model (patched in memory: the voice's file is not changed). Words are the phonemes
between espeak-ng's spaces, so when Piper spoke as many words as the text has, each word's
span is known without listening to the audio: aligning the take afterwards (decoding
the MP3, pocketsphinx) cost the server more CPU than the MP3 encoding. When the counts
differ, espeak-ng has most often said two or three short words as one ("in the",
"of a", "had to"): each spoken word is then matched to the run of the text's words whose
sounds, said one by one, add up nearest to its own, and its span is shared among them by
their sounds. Numbers, and texts with more spoken words than written ones (abbreviations,
symbols), have no word spans here: the take is aligned from its audio like any other
provider's.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# Phonemes that are pauses, not sounds of a word.
_PUNCTUATION = frozenset(".,;:!?¡¿…\u2014\u2013-\"'()«»“”")
# Marks of stress and length: not sounds of their own.
_MARKS = frozenset("ˈˌːˑʲ")
# A token with a digit is spoken as several words ("1999": "nineteen ninety-nine").
_DIGIT = re.compile(r"\d")
# The most written words espeak-ng says as one, and what a join costs against a sound of
# difference (so that one word for one word wins a tie).
_MOST_JOINED = 3
_JOIN_COST = 0.5

Span = tuple[int, int]


def with_durations(model: Path) -> bytes:
    """The voice model with its phoneme durations as a second output, serialized for
    onnxruntime; as it is when it already has that output."""
    import onnx
    from piper.patch_voice_with_alignment import add_alignment_output

    loaded = onnx.load(str(model))
    # Already an output, or no duration tensor to expose: the audio alone, no words.
    with contextlib.suppress(ValueError):
        add_alignment_output(loaded)
    return bytes(loaded.SerializeToString())


def _words(phonemes: Sequence[str], id_map: dict[str, Any]) -> list[list[tuple[int, str]]]:
    """Each spoken word's sounding phonemes, with their place among the phonemes the
    voice has (Piper leaves the others out of its ids too): espeak-ng's spaces end a word,
    punctuation is a pause, not a sound of one."""
    words: list[list[tuple[int, str]]] = []
    word: list[tuple[int, str]] | None = None
    for place, phoneme in enumerate(p for p in phonemes if p in id_map):
        if phoneme.isspace():
            word = None
        elif phoneme not in _PUNCTUATION:
            if word is None:
                word = []
                words.append(word)
            word.append((place, phoneme))
    return words


def word_spans(
    phonemes: list[str], id_map: dict[str, Any], id_samples: Any, audio: np.ndarray, level: float
) -> list[Span]:
    """Each spoken word's (first, end) sample in ``audio``, one Piper sentence: from its
    first sample louder than ``level`` to the end of its last sound."""
    pad = len(id_map.get("_", ()))
    index = len(id_map["^"]) + pad
    ends = [int(np.sum(id_samples[:index]))]  # ends[n]: where the n-th voiced phoneme starts
    for phoneme in (p for p in phonemes if p in id_map):
        width = len(id_map[phoneme]) + pad
        ends.append(ends[-1] + int(np.sum(id_samples[index : index + width])))
        index += width
    spans = [(ends[word[0][0]], ends[word[-1][0] + 1]) for word in _words(phonemes, id_map)]
    return [(_onset(audio, start, end, level), end) for start, end in spans]


def _onset(audio: np.ndarray, start: int, end: int, level: float) -> int:
    """The first sample in [start, end) louder than ``level`` (``start`` when none is)."""
    loud = np.flatnonzero(np.abs(audio[start:end]) > level)
    return start + int(loud[0]) if loud.size else start


def sounds_of(phonemes: Sequence[str], id_map: dict[str, Any]) -> list[int]:
    """How many sounds each spoken word has, for the words ``word_spans`` finds."""
    return [sum(p not in _MARKS for _, p in word) for word in _words(phonemes, id_map)]


def joined(expected: list[int], spoken: list[int]) -> list[int] | None:
    """How many of the text's words each spoken word says: the split of ``expected`` (each
    written word's sounds, said alone) into ``len(spoken)`` runs of at most
    ``_MOST_JOINED`` words whose sums are nearest the spoken words' sounds; None when no
    split fits."""
    written, said = len(expected), len(spoken)
    extra = written - said
    if extra < 0 or extra > said * (_MOST_JOINED - 1):
        return None
    inf = float("inf")
    # best[j][i]: the least cost of saying the first i written words as the first j spoken.
    best = [[inf] * (written + 1) for _ in range(said + 1)]
    run = [[0] * (written + 1) for _ in range(said + 1)]
    best[0][0] = 0.0
    for j in range(1, said + 1):
        for i in range(j, min(written, j + extra) + 1):
            for k in range(1, min(_MOST_JOINED, i) + 1):
                cost = best[j - 1][i - k] + abs(spoken[j - 1] - sum(expected[i - k : i]))
                cost += _JOIN_COST * (k - 1)
                if cost < best[j][i]:
                    best[j][i], run[j][i] = cost, k
    if best[said][written] == inf:
        return None
    runs, i = [], written
    for j in range(said, 0, -1):
        runs.append(run[j][i])
        i -= run[j][i]
    return runs[::-1]


def words_of(
    text: str,
    spans: list[tuple[float, float]],
    spoken: list[int] | None = None,
    said_alone: Callable[[str], int] | None = None,
) -> tuple[dict[str, Any], ...] | None:
    """The text's words with the spans (seconds) Piper spoke them at, or None when they
    cannot be matched. With fewer spans than words, ``spoken`` (each spoken word's
    sounds) and ``said_alone`` (a written word's sounds) match them by ``joined``."""
    tokens = text.split()
    if not spans or any(_DIGIT.search(token) for token in tokens):
        return None
    if len(tokens) == len(spans):
        runs, shares = [1] * len(tokens), [1] * len(tokens)
    elif spoken is not None and said_alone is not None and len(spoken) == len(spans):
        alone = {token: max(1, said_alone(token)) for token in set(tokens)}
        shares = [alone[token] for token in tokens]
        found = joined(shares, spoken)
        if found is None:
            return None
        runs = found
    else:
        return None
    return tuple(_shared(tokens, spans, runs, shares))


def _shared(
    tokens: list[str], spans: list[tuple[float, float]], runs: list[int], shares: list[int]
) -> Iterator[dict[str, Any]]:
    """Each spoken word's span shared among the written words it says, by their sounds."""
    at = 0
    for (start, end), count in zip(spans, runs, strict=True):
        part = shares[at : at + count]
        edge = start
        for n, token in enumerate(tokens[at : at + count]):
            stop = end if n == count - 1 else round(edge + (end - start) * part[n] / sum(part), 3)
            yield {"text": token, "start_seconds": edge, "end_seconds": stop}
            edge = stop
        at += count
