"""Splitting real prose (public-domain chapters in tests/fixtures/prose): no sentence that
fits an item is cut, a longer one is cut at its clause ends, and paragraph breaks inside
an item stay as blank lines."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from speechbatch.domain.cutting import clause_pieces, inner_sentences
from speechbatch.domain.documents import (
    PARAGRAPH_BREAK,
    Section,
    SplitDocument,
    split_document,
    spoken_text,
    squeeze,
)

PROSE = Path(__file__).resolve().parents[1] / "fixtures" / "prose"
CHAPTERS = sorted(PROSE.glob("*.txt"))
# Where a sentence ends (its closing quotes included) and where a clause does.
SENTENCE_END = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*$")
CLAUSE_END = re.compile(r"([;:,\u2014\u2013]|\s--?)[\"'\u201d\u2019)\]]*$")
# The longest sentence of these chapters is shorter than this: with items at least this
# long, every cut falls between sentences.
LONGEST_SENTENCE = 420
SPLITS = settings(max_examples=40, deadline=None)


@functools.cache
def chapter(path: Path) -> Section:
    """A fixture as the reader of a text document gives it: its first line the heading."""
    paragraphs = path.read_text().strip().split("\n\n")
    return Section(paragraphs[0], tuple(paragraphs), heading=True)


def _letters(text: str) -> int:
    return len("".join(text.split()))


def _cuts_inside_paragraphs(section: Section, split: SplitDocument) -> list[str]:
    """The text of every item that ends inside a paragraph (the next item goes on with it),
    found by counting the characters that are not whitespace."""
    paragraph_ends, at = set(), 0
    for paragraph in section.paragraphs:
        at += _letters(paragraph)
        paragraph_ends.add(at)
    cuts, at = [], 0
    for item in split.items[:-1]:
        at += _letters(item.text)
        if at not in paragraph_ends:
            cuts.append(item.text)
    return cuts


@SPLITS
@given(path=st.sampled_from(CHAPTERS), max_chars=st.integers(200, 4096))
def test_prose_keeps_every_word_within_the_bound(path: Path, max_chars: int) -> None:
    section = chapter(path)
    split = split_document([section], max_chars)
    assert squeeze(" ".join(item.text for item in split.items)) == spoken_text([section])
    assert all(0 < len(item.text) <= max_chars for item in split.items)


@SPLITS
@given(path=st.sampled_from(CHAPTERS), max_chars=st.integers(200, 4096))
def test_a_cut_inside_a_paragraph_falls_at_a_sentence_or_a_clause_end(
    path: Path, max_chars: int
) -> None:
    section = chapter(path)
    split = split_document([section], max_chars)
    for text in _cuts_inside_paragraphs(section, split):
        assert SENTENCE_END.search(text) or CLAUSE_END.search(text), text[-80:]
        if max_chars >= LONGEST_SENTENCE:
            assert SENTENCE_END.search(text), text[-80:]


@SPLITS
@given(path=st.sampled_from(CHAPTERS), max_chars=st.integers(200, 4096))
def test_paragraphs_in_one_item_keep_a_blank_line_between_them(path: Path, max_chars: int) -> None:
    section = chapter(path)
    split = split_document([section], max_chars)
    paragraphs = [squeeze(p) for p in section.paragraphs]
    breaks = sum(item.text.count(PARAGRAPH_BREAK) for item in split.items)
    cut_at_breaks = len(split.items) - 1 - len(_cuts_inside_paragraphs(section, split))
    # Every break between two paragraphs is either inside an item or between two items ...
    assert breaks + cut_at_breaks == len(paragraphs) - 1
    # ... and a blank line is never put inside a paragraph.
    for item in split.items:
        for part in item.text.split(PARAGRAPH_BREAK):
            assert "\n" not in part
            assert any(part in p for p in paragraphs), part[:80]


def test_a_long_quotation_is_cut_between_its_sentences() -> None:
    # Enfield's tale: over 4,000 characters of one quotation, which pysbd reads as one
    # sentence; cut at words, an item ended "more frightened," (issue 43).
    section = chapter(PROSE / "stevenson-story-of-the-door.txt")
    tale = next(p for p in section.paragraphs if len(p) > 4_000)
    split = split_document([Section("Tale", (tale,))], 1500)
    assert len(split.items) >= 3
    assert all(SENTENCE_END.search(item.text) for item in split.items)
    assert not any(item.text[-16:] == "more frightened," for item in split.items)


def test_a_long_sentence_is_cut_at_its_clauses_before_its_words() -> None:
    clauses = [f"the {n}th clause of a sentence that goes on and on and on" for n in range(12)]
    sentence = "; ".join(clauses[:6]) + ", " + ", ".join(clauses[6:]) + "."
    split = split_document([Section("T", (sentence,))], 200)
    texts = [item.text for item in split.items]
    assert all(t.endswith((";", ",", ".")) for t in texts), texts
    # The strong clause ends (semicolons) are taken while they serve.
    assert texts[0].endswith(";")
    assert squeeze(" ".join(texts)) == sentence


def test_the_longest_sentence_of_the_fixtures_is_under_the_bound_the_tests_assume() -> None:
    from speechbatch.domain.documents import _Sentences

    for path in CHAPTERS:
        cutter = _Sentences(LONGEST_SENTENCE)
        for paragraph in chapter(path).paragraphs:
            longest = max(len(s) for s in cutter(squeeze(paragraph)))
            assert longest < LONGEST_SENTENCE, (path.name, longest)


def test_a_quotations_sentences_end_at_full_stops_but_not_at_abbreviations() -> None:
    quoted = (
        '"I saw Mr. Hyde at St. Giles with Dr. J. Lanyon. He ran!" said he. "Then? '
        'Nothing... The end," he added.'
    )
    assert inner_sentences(quoted) == [
        '"I saw Mr. Hyde at St. Giles with Dr. J. Lanyon.',
        'He ran!" said he.',
        '"Then?',
        "Nothing...",
        'The end," he added.',
    ]
    assert " ".join(inner_sentences(quoted)) == quoted


def test_clause_pieces_join_back_and_fit() -> None:
    sentence = "one, two; three - four -- five: six \u2014 seven, " * 20
    sentence = sentence.strip()
    for max_chars in (10, 25, 60, 200):
        pieces = clause_pieces(sentence, max_chars)
        assert " ".join(pieces) == sentence
        assert all(len(p) <= max_chars for p in pieces)
