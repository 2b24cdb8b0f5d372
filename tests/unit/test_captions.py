"""Captions that are subtitles: cues cut from an item's text and its take's timing."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from speechbatch.domain.captions import LINE_CHARS, MAX_SECONDS, item_cues, wrap
from speechbatch.domain.renders import Cue, srt_cue, vtt_cue
from speechbatch.domain.timing import Span, Timing, sentences_from_words, sentences_of

PROSE = (
    "Mr. Utterson the lawyer was a man of a rugged countenance, that was never lighted by a "
    "smile; cold, scanty and embarrassed in discourse; backward in sentiment; lean, long, "
    "dusty, dreary, and yet somehow lovable. At friendly meetings, and when the wine was to "
    "his taste, something eminently human beaconed from his eye. Yes."
)

words = st.text(
    alphabet=st.characters(codec="utf-8", categories=("L", "N", "P")), min_size=1, max_size=60
)
texts = st.lists(words, min_size=1, max_size=120).map(" ".join)


def _flat(text: str) -> str:
    return "".join(text.split())


def _check(cues: list[Cue], text: str, start: float, end: float) -> None:
    assert _flat("".join(c.text for c in cues)) == _flat(text)
    for cue in cues:
        assert start - 1e-3 <= cue.start <= cue.end <= end + 1e-3
        assert cue.end - cue.start <= MAX_SECONDS + 1e-9
        lines = cue.text.split("\n")
        assert 1 <= len(lines) <= 2
        assert all(0 < len(line) <= LINE_CHARS for line in lines)
    assert [c.start for c in cues] == sorted(c.start for c in cues)
    assert all(a.end <= b.start + 1e-9 for a, b in itertools.pairwise(cues))


@settings(max_examples=200, deadline=None)
@given(texts, st.floats(0, 3600), st.floats(0.1, 120))
def test_cues_are_short_fit_two_lines_and_keep_the_text_in_order_without_timing(
    text: str, start: float, seconds: float
) -> None:
    _check(item_cues(text, None, start, start + seconds), text, start, start + seconds)


@settings(max_examples=200, deadline=None)
@given(texts, st.floats(0, 3600), st.floats(0.01, 0.6))
def test_cues_follow_timed_words(text: str, start: float, per_word: float) -> None:
    tokens = text.split()
    spoken = [
        Span(w, round(i * per_word, 3), round((i + 0.8) * per_word, 3))
        for i, w in enumerate(tokens)
    ]
    timing = Timing(sentences_from_words(sentences_of(text), spoken), tuple(spoken))
    end = start + len(tokens) * per_word
    cues = item_cues(text, timing, start, end)
    _check(cues, text, start, end)
    # Each cue starts where its first word is spoken.
    starts = {round(start + w.start, 3) for w in spoken}
    assert all(c.start in starts for c in cues)


def test_a_long_sentence_is_cut_at_its_clause_ends_and_sentences_never_share_a_cue() -> None:
    cues = item_cues(PROSE, None, 10.0, 40.0)
    _check(cues, PROSE, 10.0, 40.0)
    assert cues[-1].text == "Yes."
    cut_at_clause = [c for c in cues[:-1] if c.text[-1] in ",;."]
    assert len(cut_at_clause) >= len(cues[:-1]) - 1
    assert any(c.text.endswith("lovable.") for c in cues)


def test_sentence_timing_places_cues_where_their_sentences_are_spoken() -> None:
    text = "First one here. Then a second sentence."
    timing = Timing((Span("First one here.", 0.2, 1.1), Span("Then a second sentence.", 1.6, 3.0)))
    cues = item_cues(text, timing, 5.0, 8.5)
    assert [(c.start, c.text) for c in cues] == [
        (5.2, "First one here."),
        (6.6, "Then a second sentence."),
    ]


def test_two_lines_are_balanced_and_vtt_and_srt_carry_the_same_cue() -> None:
    assert wrap("a" * 42) == ["a" * 42]
    lines = wrap("one two three four five six seven eight nine ten eleven twelve")
    assert lines is not None and len(lines) == 2 and abs(len(lines[0]) - len(lines[1])) < 8
    assert wrap("x" * 43) is None
    cue = item_cues("one two three four five six seven eight nine ten eleven twelve", None, 0, 3)[0]
    assert vtt_cue(1, cue).splitlines()[2:4] == srt_cue(1, cue).splitlines()[2:4] == lines
