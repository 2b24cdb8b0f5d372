"""Spans put around sentences and words in a book's own pages: the markup they make, and
what wrapping a long paragraph costs, counted in the characters moved in and out of its
text nodes rather than timed."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from speechbatch.adapters.epub_spans import XHTML
from speechbatch.adapters.read_along_pages import BookPage, parse_page, sync_pages
from speechbatch.domain.read_along import BookChapter, Passage
from speechbatch.domain.renders import Cue
from tests.support.text_moves import Moved, counting_parser


def _passage(position: int, pieces: list[str]) -> Passage:
    cues = tuple(Cue(float(n), float(n + 1), piece) for n, piece in enumerate(pieces))
    return Passage(position, Cue(0.0, float(len(pieces)), " ".join(pieces)), cues)


def _html(body: str) -> bytes:
    return f"<html xmlns='{XHTML}'><head><title>t</title></head><body>{body}</body></html>".encode()


def _body(page: BookPage) -> str:
    return etree.tostring(page.body, encoding="unicode").split(">", 1)[1].rsplit("<", 1)[0]


@dataclass(frozen=True)
class Word:
    text: str
    emphasized: bool

    def markup(self, anchor: str | None = None) -> str:
        inner = self.text if anchor is None else f'<span id="{anchor}">{self.text}</span>'
        return f"<em>{inner}</em>" if self.emphasized else inner


@dataclass(frozen=True)
class Paragraph:
    """Sentences of words, the whitespace around and between them, and whether the item
    is timed word by word (a span per word) or by sentence."""

    lead: str
    sentences: list[tuple[list[Word], list[str]]]  # words, and the spaces between them
    gaps: list[str]  # after each sentence
    by_word: bool

    def markup(self, position: int | None = None) -> str:
        """The paragraph as the page has it; with ``position``, as the wrapping should
        leave it: each piece in a span named after the item and the piece."""
        anchors = (f"speechbatch-item-{position}-{n}" for n in itertools.count(1))
        by_word = position is not None and self.by_word
        out = [self.lead]
        for (words, spaces), gap in zip(self.sentences, self.gaps, strict=True):
            sentence = "".join(
                word.markup(next(anchors) if by_word else None) + space
                for word, space in zip(words, [*spaces, ""], strict=True)
            )
            if position is not None and not self.by_word:
                sentence = f'<span id="{next(anchors)}">{sentence}</span>'
            out += [sentence, gap]
        return f"<p>{''.join(out)}</p>"

    def pieces(self) -> list[str]:
        if self.by_word:
            return [word.text for words, _ in self.sentences for word in words]
        return [" ".join(word.text for word in words) for words, _ in self.sentences]


SPACES = st.sampled_from([" ", "  ", "\n", "\n  ", "\t "])
GAPS = st.sampled_from(["", " ", "  ", "\n", "\n  "])
TEXTS = st.text(alphabet="abcdeéßXYZ019.,;'!?", min_size=1, max_size=8)


@st.composite
def sentences(draw: Any) -> tuple[list[Word], list[str]]:
    texts = draw(st.lists(TEXTS, min_size=1, max_size=6))
    # A sentence of one emphasized word would be wrapped inside its element: not drawn.
    marks = [draw(st.booleans()) and len(texts) > 1 for _ in texts]
    spaces = [draw(SPACES) for _ in texts[1:]]
    return [Word(t, m) for t, m in zip(texts, marks, strict=True)], spaces


@st.composite
def paragraphs(draw: Any) -> Paragraph:
    drawn = draw(st.lists(sentences(), min_size=1, max_size=12))
    gaps = [draw(GAPS) for _ in drawn]
    return Paragraph(draw(GAPS), drawn, gaps, draw(st.booleans()))


@settings(max_examples=300, deadline=None)
@given(st.lists(paragraphs(), min_size=1, max_size=5))
def test_every_sentence_or_word_is_wrapped_in_place_and_the_text_kept(
    drawn: list[Paragraph],
) -> None:
    page = parse_page("one.xhtml", _html("".join(p.markup() for p in drawn)), "t")
    passages = [_passage(n, p.pieces()) for n, p in enumerate(drawn, start=1)]
    placed, _ = sync_pages([page], [BookChapter("One", passages)])
    assert _body(page) == "".join(p.markup(n) for n, p in enumerate(drawn, start=1))
    expected = [
        f"item-{n}-{k}" for n, p in enumerate(drawn, 1) for k in range(1, len(p.pieces()) + 1)
    ]
    assert [p.clip.anchor for p in placed] == [f"speechbatch-{a}" for a in expected]


def _characters_moved(sentences: int) -> int:
    """Characters moved in and out of text nodes to wrap each sentence of one plain
    paragraph, synced as items of 400 sentences."""
    text = [f"Sentence number {n} ends here." for n in range(sentences)]
    passages = [
        _passage(n + 1, text[at : at + 400]) for n, at in enumerate(range(0, sentences, 400))
    ]
    with counting_parser() as parser:
        page = BookPage("one.xhtml", etree.fromstring(_html(f"<p>{' '.join(text)}</p>"), parser))
        Moved.count = 0
        placed, _ = sync_pages([page], [BookChapter("One", passages)])
    assert len(placed) == sentences
    return Moved.count


def test_wrapping_the_sentences_of_one_paragraph_moves_its_text_a_bounded_number_of_times() -> None:
    paragraph = len(" ".join(f"Sentence number {n} ends here." for n in range(2_000)))
    small, large = _characters_moved(1_000), _characters_moved(2_000)
    assert large <= 2.2 * small, (small, large)  # twice the sentences, not four times
    assert large <= 8 * paragraph, (large, paragraph)  # a few passes over it
