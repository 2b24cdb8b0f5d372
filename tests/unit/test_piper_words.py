"""Piper's words from its model's phoneme durations (``providers/piper_words.py``)."""

from __future__ import annotations

import numpy as np

from speechbatch.adapters.providers.piper_words import joined, sounds_of, word_spans, words_of

# Each phoneme one id, each followed by the pad (as Piper's own map is).
STRESS = "\u02c8"  # espeak-ng's primary stress mark
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


def test_sounds_are_counted_per_spoken_word_without_marks_or_pauses() -> None:
    id_map = {"_": [0], "^": [1], "$": [2], " ": [3], ".": [4], "a": [5], "b": [6], STRESS: [7]}
    assert sounds_of([STRESS, "a", "b", " ", "a", ".", " ", "."], id_map) == [2, 1]
    assert sounds_of(["a", "?", "b"], id_map) == [2]  # a phoneme the voice lacks is skipped


def test_one_spoken_word_for_one_written_word_when_the_sounds_agree() -> None:
    assert joined([3, 2, 4], [3, 2, 4]) == [1, 1, 1]


def test_written_words_said_as_one_are_found_by_their_sounds() -> None:
    # "walked slowly in the empty station": "in the" said as one word of 4 sounds.
    assert joined([4, 5, 2, 2, 5, 7], [4, 5, 4, 5, 7]) == [1, 1, 2, 1, 1]
    # "he had to go": "had to" as one.
    assert joined([2, 3, 2, 2], [2, 5, 2]) == [1, 2, 1]


def test_no_split_when_more_words_were_spoken_or_too_many_joined() -> None:
    assert joined([3], [1, 2]) is None
    assert joined([1, 1, 1, 1], [4]) is None  # at most three written words in one


def test_a_joined_words_span_is_shared_by_their_sounds() -> None:
    words = words_of(
        "in the house",
        [(0.0, 0.6), (0.7, 1.0)],
        spoken=[4, 3],
        said_alone={"in": 2, "the": 2, "house": 3}.__getitem__,
    )
    assert words == (
        {"text": "in", "start_seconds": 0.0, "end_seconds": 0.3},
        {"text": "the", "start_seconds": 0.3, "end_seconds": 0.6},
        {"text": "house", "start_seconds": 0.7, "end_seconds": 1.0},
    )
