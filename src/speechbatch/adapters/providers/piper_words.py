"""Each word's place in Piper's speech, from the voice model's own phoneme durations.

A Piper voice decides how many samples each phoneme lasts before it makes the audio;
Piper's ``patch_voice_with_alignment`` exposes those durations as a second output of the
model (patched in memory: the voice's file is not changed). Words are the phonemes
between espeak-ng's spaces, so when Piper spoke as many words as the text has, each word's
span is known without listening to the audio: aligning the take afterwards (decoding
the MP3, pocketsphinx) cost the server more CPU than the MP3 encoding. When the counts
differ (numbers, abbreviations and symbols are spoken as several words or none), there
are no word spans here and the take is aligned from its audio like any other provider's.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

import numpy as np

# Phonemes that are pauses, not sounds of a word.
_PUNCTUATION = frozenset(".,;:!?¡¿…\u2014\u2013-\"'()«»“”")
# A token with a digit is spoken as several words ("1999": "nineteen ninety-nine").
_DIGIT = re.compile(r"\d")

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


def word_spans(
    phonemes: list[str], id_map: dict[str, Any], id_samples: Any, audio: np.ndarray, level: float
) -> list[Span]:
    """Each spoken word's (first, end) sample in ``audio``, one Piper sentence: from its
    first sample louder than ``level`` to the end of its last sound."""
    pad = len(id_map.get("_", ()))
    at = int(np.sum(id_samples[: len(id_map["^"]) + pad]))
    index = len(id_map["^"]) + pad
    spans: list[Span] = []
    word: list[int] | None = None  # [start, end] of the word being read
    for phoneme in phonemes:
        if phoneme not in id_map:  # Piper leaves it out of the ids too
            continue
        width = len(id_map[phoneme]) + pad
        samples = int(np.sum(id_samples[index : index + width]))
        index += width
        if phoneme.isspace():
            word = None
        elif phoneme not in _PUNCTUATION:
            if word is None:
                word = [at, at + samples]
                spans.append((0, 0))
            word[1] = at + samples
            spans[-1] = (word[0], word[1])
        at += samples
    return [(_onset(audio, start, end, level), end) for start, end in spans]


def _onset(audio: np.ndarray, start: int, end: int, level: float) -> int:
    """The first sample in [start, end) louder than ``level`` (``start`` when none is)."""
    loud = np.flatnonzero(np.abs(audio[start:end]) > level)
    return start + int(loud[0]) if loud.size else start


def words_of(text: str, spans: list[tuple[float, float]]) -> tuple[dict[str, Any], ...] | None:
    """The text's words with the spans (seconds) Piper spoke them at, or None when they
    cannot be matched one to one."""
    tokens = text.split()
    if len(tokens) != len(spans) or any(_DIGIT.search(token) for token in tokens):
        return None
    return tuple(
        {"text": token, "start_seconds": start, "end_seconds": end}
        for token, (start, end) in zip(tokens, spans, strict=True)
    )
