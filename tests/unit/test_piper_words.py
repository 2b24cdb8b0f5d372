"""Piper's words from its model's phoneme durations (``providers/piper_words.py``)."""

from __future__ import annotations

import numpy as np

from speechbatch.adapters.providers.piper_words import word_spans, words_of

# Each phoneme one id, each followed by the pad (as Piper's own map is).
ID_MAP = {"_": [0], "^": [1], "$": [2], " ": [3], ".": [4], "a": [5], "b": [6]}


def _durations(phonemes: list[str], samples: list[int]) -> np.ndarray:
    """Samples per id: BOS and its pad, then each phoneme and its pad (the pad 0), EOS."""
    per_id = [samples[0], 0]
    for width in samples[1:]:
        per_id += [width, 0]
    return np.array([*per_id, 0])


def test_words_run_from_their_first_sound_to_their_last() -> None:
    phonemes = ["a", "b", " ", "b", "."]
    durations = _durations(phonemes, [10, 20, 30, 5, 40, 50])
    audio = np.ones(155, dtype=np.float32)
    assert word_spans(phonemes, ID_MAP, durations, audio, 0.5) == [(10, 60), (65, 105)]


def test_a_word_starts_where_it_is_first_heard() -> None:
    phonemes = ["a", "b"]
    durations = _durations(phonemes, [10, 20, 30])
    audio = np.zeros(60, dtype=np.float32)
    audio[17:] = 1.0
    assert word_spans(phonemes, ID_MAP, durations, audio, 0.5) == [(17, 60)]


def test_phonemes_the_voice_lacks_are_skipped_as_piper_skips_them() -> None:
    phonemes = ["a", "?", "b"]
    durations = _durations(["a", "b"], [10, 20, 30])
    assert word_spans(phonemes, ID_MAP, durations, np.ones(60), 0.5) == [(10, 60)]


def test_the_words_are_the_texts_when_as_many_were_spoken() -> None:
    assert words_of("Hello there.", [(0.1, 0.4), (0.5, 0.9)]) == (
        {"text": "Hello", "start_seconds": 0.1, "end_seconds": 0.4},
        {"text": "there.", "start_seconds": 0.5, "end_seconds": 0.9},
    )


def test_no_words_when_the_counts_differ() -> None:
    assert words_of("in the house", [(0.1, 0.4), (0.5, 0.9)]) is None


def test_no_words_for_a_text_with_numbers() -> None:
    assert words_of("at 9", [(0.1, 0.4), (0.5, 0.9)]) is None
