"""A take's timing without audio: sentences matched to stretches of speech, a provider's
spans, voices' languages, and the stored JSON read back."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from speechbatch.domain.timing import (
    Span,
    Timing,
    estimated_timing,
    language_of,
    provided_timing,
    sentences_from_speech,
    sentences_from_words,
    timing_from_json,
)

TEXTS = ["A short one.", "Then a much longer sentence follows it here.", "End."]


def test_sentences_go_to_the_pauses_their_lengths_predict_and_prefer_long_ones() -> None:
    # Four stretches: a comma's short pause inside the long sentence (0.1 s), and the
    # sentences' own pauses (0.5 s).
    speech = [(0.0, 0.9), (1.4, 2.6), (2.7, 4.2), (4.7, 5.0)]
    spans = sentences_from_speech(TEXTS, speech)
    assert [(s.start, s.end) for s in spans] == [(0.0, 0.9), (1.4, 4.2), (4.7, 5.0)]
    assert [s.text for s in spans] == TEXTS


def test_fewer_pauses_than_sentences_share_the_speech_by_length() -> None:
    spans = sentences_from_speech(TEXTS, [(1.0, 5.0)])
    assert spans[0].start == 1.0 and spans[-1].end == 5.0
    assert spans[0].end == spans[1].start < spans[1].end == spans[2].start


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(alphabet="abc .", min_size=1, max_size=30), min_size=1, max_size=12),
    st.lists(st.tuples(st.floats(0.05, 3), st.floats(0.05, 1)), min_size=1, max_size=30),
)
def test_every_sentence_gets_a_span_in_order_inside_the_speech(
    texts: list[str], pieces: list[tuple[float, float]]
) -> None:
    speech, at = [], 0.0
    for length, pause in pieces:
        speech.append((round(at, 3), round(at + length, 3)))
        at += length + pause
    spans = sentences_from_speech(texts, speech)
    assert [s.text for s in spans] == texts
    assert all(speech[0][0] - 1e-3 <= s.start <= s.end <= speech[-1][1] + 1e-3 for s in spans)
    assert all(a.end <= b.start + 1e-3 for a, b in itertools.pairwise(spans))


def test_words_make_sentences_and_a_providers_words_are_kept() -> None:
    words = [
        Span(w, i * 0.5, i * 0.5 + 0.4)
        for i, w in enumerate(["One", "two.", "Three", "four", "five."])
    ]
    assert sentences_from_words(["One two.", "Three four five."], words) == (
        Span("One two.", 0.0, 0.9),
        Span("Three four five.", 1.0, 2.4),
    )
    given_words = provided_timing([w.as_json() for w in words], "One two. Three four five.")
    assert given_words is not None and given_words.level == "word"
    sentences = [{"text": "One two.", "start_seconds": 0.1, "end_seconds": 0.9}]
    given_sentences = provided_timing(sentences, "One two.")
    assert given_sentences == Timing((Span("One two.", 0.1, 0.9),))
    assert provided_timing([{"start": 1}], "x") is None


def test_stored_timing_reads_back_and_an_unmeasured_take_is_estimated() -> None:
    timing = Timing(
        (Span("Hi there.", 0.1, 0.8),), (Span("Hi", 0.1, 0.3), Span("there.", 0.35, 0.8))
    )
    assert timing_from_json(timing.as_json()) == timing
    assert timing_from_json({"sentences": "nonsense"}) is None
    assert timing_from_json(None) is None
    estimated = estimated_timing("One. Two two.", 3.0)
    assert estimated.level == "sentence"
    assert [s.text for s in estimated.sentences] == ["One.", "Two two."]
    assert estimated.sentences[0].start == 0.0 and estimated.sentences[-1].end == 3.0


def test_a_voice_says_its_language_when_its_name_does() -> None:
    assert language_of("en-us") == "en"
    assert language_of("de") == "de"
    assert language_of("piper:en_US-joe-medium") == "en"
    assert language_of("de_DE-thorsten-medium") == "de"
    assert language_of("alloy") is None
    assert language_of("elevenlabs:21m00Tcm4TlvDq8rCL9Xx") is None
