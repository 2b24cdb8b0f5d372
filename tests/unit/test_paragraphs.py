"""Paragraph pauses: where a render cuts an item's audio (from its take's timing), how the
timing moves with the cut, and the splice made on decoded audio as it streams."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from speechbatch.adapters.audio.splice import spliced
from speechbatch.domain.captions import item_pieces
from speechbatch.domain.paragraphs import (
    Splice,
    paragraph_breaks,
    paragraph_splices,
    paragraphs_of,
    spliced_length,
    spliced_timing,
)
from speechbatch.domain.timing import Span, Timing

RATE = 1000  # one sample a millisecond: offsets read as milliseconds
TWO = "One two. Three four.\n\nFive six."
SENTENCES = Timing(
    (Span("One two.", 0.0, 0.5), Span("Three four.", 0.6, 1.2), Span("Five six.", 1.5, 2.0))
)
WORDS = Timing(
    SENTENCES.sentences,
    tuple(
        Span(w, s, e)
        for w, s, e in [
            ("One", 0.0, 0.2), ("two.", 0.25, 0.5), ("Three", 0.6, 0.8), ("four.", 0.85, 1.1),
            ("Five", 1.55, 1.7), ("six.", 1.75, 2.0),
        ]
    ),
)  # fmt: skip


def test_paragraphs_are_split_at_blank_lines_only() -> None:
    assert paragraphs_of("A b.\nC d.\n \n\nE  f.\n") == ["A b. C d.", "E f."]
    assert paragraphs_of("One line.") == ["One line."]


def test_a_break_falls_between_the_last_word_of_a_paragraph_and_the_next_ones_first() -> None:
    assert paragraph_breaks(TWO, WORDS) == [(1.1, 1.55)]


def test_a_break_falls_between_sentences_when_only_sentences_are_timed() -> None:
    assert paragraph_breaks(TWO, SENTENCES) == [(1.2, 1.5)]


def test_a_providers_own_sentences_place_the_break_by_their_words() -> None:
    # Two timed sentences where the text has three: the break is where one of them ends.
    provider = Timing((Span("One two. Three four.", 0.0, 1.2), Span("Five six.", 1.5, 2.0)))
    assert paragraph_breaks(TWO, provider) == [(1.2, 1.5)]
    inside = Timing((Span("One two.", 0.0, 0.5), Span("Three four. Five six.", 0.6, 2.0)))
    assert paragraph_breaks(TWO, inside) == []


def test_no_break_without_paragraphs_or_timing() -> None:
    assert paragraph_breaks("One two. Three four. Five six.", SENTENCES) == []
    assert paragraph_breaks(TWO, None) == []
    assert paragraph_splices(TWO, None, 700, RATE) == ()


def test_the_splice_replaces_the_pause_with_the_gap() -> None:
    (splice,) = paragraph_splices(TWO, SENTENCES, 700, RATE)
    assert splice == Splice(1200, 1500, 700)
    assert spliced_length(2000, [splice]) == 2400


def test_touching_spans_get_the_gap_put_between_them() -> None:
    touching = Timing((Span("One two. Three four.", 0.0, 1.3), Span("Five six.", 1.3, 2.0)))
    assert paragraph_splices(TWO, touching, 500, RATE) == (Splice(1300, 1300, 500),)


def test_the_timing_moves_with_the_splice() -> None:
    splices = paragraph_splices(TWO, WORDS, 900, RATE)
    assert splices == (Splice(1100, 1550, 900),)
    moved = spliced_timing(WORDS, splices, RATE)
    assert moved is not None and moved.words is not None
    # Before the cut nothing moves; after it everything is 450 ms later.
    # (The sentence timed to 1.2 loses its last 100 ms to the cut: they were pause.)
    assert [(s.start, s.end) for s in moved.sentences] == [(0.0, 0.5), (0.6, 1.1), (2.0, 2.45)]
    assert [(w.start, w.end) for w in moved.words][3:] == [(0.85, 1.1), (2.0, 2.15), (2.2, 2.45)]


def test_a_span_starting_at_a_zero_length_cut_starts_after_the_silence() -> None:
    splices = (Splice(1300, 1300, 500),)
    touching = Timing((Span("A", 0.0, 1.3), Span("B", 1.3, 2.0)))
    moved = spliced_timing(touching, splices, RATE)
    assert moved is not None
    assert [(s.start, s.end) for s in moved.sentences] == [(0.0, 1.3), (1.8, 2.5)]


def test_splicing_decoded_pieces() -> None:
    source = np.arange(1, 11, dtype=np.float32)
    pieces = [source[:3], source[3:7], source[7:]]
    out = np.concatenate(list(spliced(pieces, [Splice(2, 5, 2), Splice(8, 8, 1)])))
    assert out.tolist() == [1, 2, 0, 0, 6, 7, 8, 0, 9, 10]


@given(
    st.integers(0, 80),
    st.lists(st.tuples(st.integers(0, 90), st.integers(0, 20), st.integers(0, 9)), max_size=4),
    st.lists(st.integers(1, 13), min_size=1, max_size=30),
)
def test_splicing_any_pieces_matches_splicing_the_whole(
    length: int, cuts: list[tuple[int, int, int]], sizes: list[int]
) -> None:
    splices, at = [], 0
    for start, width, silence in sorted(cuts):
        if start >= at:
            splices.append(Splice(start, start + width, silence))
            at = start + width
    source = np.arange(1, length + 1, dtype=np.float32)
    pieces, offset = [], 0
    for size in sizes * (length // max(sum(sizes), 1) + 1):
        if offset >= length:
            break
        pieces.append(source[offset : offset + size])
        offset += size
    expected: list[float] = []
    kept = 0
    for splice in splices:
        expected += source[kept : min(splice.start, length)].tolist() + [0.0] * splice.silence
        kept = max(kept, min(splice.end, length))
    expected += source[kept:].tolist()
    out = list(spliced(pieces, splices))
    got = np.concatenate(out).tolist() if out else []
    assert got == expected
    assert len(got) == spliced_length(length, splices)


def test_a_read_along_item_is_cut_into_its_words_where_timed_else_its_sentences() -> None:
    text = "One two. Three four. Five six."
    words = item_pieces(text, WORDS, 10.0, 12.1)
    assert [(w.text, w.start) for w in words][:3] == [("One", 10.0), ("two.", 10.25),
                                                       ("Three", 10.6)]  # fmt: skip
    assert len(words) == 6
    sentences = item_pieces(text, SENTENCES, 10.0, 12.1)
    assert [(s.text, s.start, s.end) for s in sentences] == [
        ("One two.", 10.0, 10.5), ("Three four.", 10.6, 11.2), ("Five six.", 11.5, 12.0),
    ]  # fmt: skip
