"""A document's text cut into items: chapters, paragraphs and sentences, nothing dropped.

The parsers (``adapters/documents``) turn a file into ``Section``s of spoken text; this
module packs them into items of at most ``max_chars`` characters. The invariant every
caller relies on: the items' texts joined by spaces equal the sections' texts joined by
spaces, up to whitespace, and no word is cut (a single word longer than ``max_chars``,
which no language has, is the one exception: it is cut, because it cannot be said whole).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pysbd

_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Section:
    """One chapter's spoken text: its title, and its paragraphs in reading order.

    ``heading`` says the first paragraph is the chapter's heading, which stands alone as
    the chapter's first item (Markdown headings; an EPUB chapter that opens with one).
    """

    title: str
    paragraphs: tuple[str, ...]
    heading: bool = False


@dataclass(frozen=True)
class SplitItem:
    """One item of an imported document and the index of its chapter."""

    text: str
    chapter: int


@dataclass(frozen=True)
class SplitChapter:
    """A chapter of an imported document: its title and the position of its first item."""

    index: int
    title: str
    first_position: int


@dataclass(frozen=True)
class SplitDocument:
    """What an import makes: items in reading order and their chapters."""

    items: tuple[SplitItem, ...]
    chapters: tuple[SplitChapter, ...]


def squeeze(text: str) -> str:
    """``text`` with every run of whitespace made one space, and trimmed."""
    return _SPACE.sub(" ", text).strip()


def spoken_text(sections: Iterable[Section]) -> str:
    """The document's spoken text: every paragraph of every section, joined by spaces."""
    return squeeze(" ".join(p for s in sections for p in s.paragraphs))


@functools.cache
def _segmenter() -> pysbd.Segmenter:
    return pysbd.Segmenter(language="en", clean=False)


def sentences(paragraph: str) -> list[str]:
    """The paragraph's sentences (pysbd), cut only where the text has whitespace.

    The splitter may cut between a full stop and a closing quote; such a cut is undone, so
    that joining the sentences with spaces gives back the paragraph up to whitespace. If it
    ever lost or changed a character, the whole paragraph is one sentence: nothing is dropped.
    """
    segments = _segmenter().segment(paragraph)
    if "".join(segments) != paragraph:
        return [squeeze(paragraph)]
    merged: list[str] = []
    for segment in segments:
        if merged and segment and not (merged[-1][-1:].isspace() or segment[0].isspace()):
            merged[-1] += segment
        else:
            merged.append(segment)
    return [s for s in (squeeze(m) for m in merged) if s]


def _word_chunks(sentence: str, max_chars: int) -> Iterator[str]:
    """A sentence longer than ``max_chars`` in chunks cut at spaces."""
    chunk = ""
    for word in sentence.split(" "):
        while len(word) > max_chars:  # no space to cut at: the only cut inside a word
            if chunk:
                yield chunk
                chunk = ""
            yield word[:max_chars]
            word = word[max_chars:]
        if not chunk:
            chunk = word
        elif len(chunk) + 1 + len(word) <= max_chars:
            chunk += " " + word
        else:
            yield chunk
            chunk = word
    if chunk:
        yield chunk


def _pieces(paragraph: str, max_chars: int) -> Iterator[str]:
    """A paragraph as pieces of at most ``max_chars``: whole, or by sentences, or by words."""
    if len(paragraph) <= max_chars:
        yield paragraph
        return
    for sentence in sentences(paragraph):
        if len(sentence) <= max_chars:
            yield sentence
        else:
            yield from _word_chunks(sentence, max_chars)


def _pack(paragraphs: Iterable[str], max_chars: int) -> Iterator[str]:
    """Paragraphs packed into items of at most ``max_chars``.

    Whole paragraphs share an item while they fit; a paragraph that does not fit the
    item being filled starts a new one (a paragraph break is the best place to cut), and
    one that is too long by itself is cut at sentences, then at words.
    """
    current = ""
    for paragraph in paragraphs:
        for piece in _pieces(paragraph, max_chars):
            if current and len(current) + 1 + len(piece) <= max_chars:
                current += " " + piece
            else:
                if current:
                    yield current
                current = piece
        if len(paragraph) > max_chars and current:
            # Let the next paragraph start its own item rather than the tail of a split one.
            yield current
            current = ""
    if current:
        yield current


def split_document(sections: Sequence[Section], max_chars: int) -> SplitDocument:
    """Cut ``sections`` into chapters and items of at most ``max_chars`` characters.

    A section without text makes no chapter; a heading is its chapter's first item.
    """
    items: list[SplitItem] = []
    chapters: list[SplitChapter] = []
    for section in sections:
        heading = section.heading and bool(section.paragraphs and squeeze(section.paragraphs[0]))
        paragraphs = [p for p in (squeeze(p) for p in section.paragraphs) if p]
        if not paragraphs:
            continue
        index = len(chapters)
        chapters.append(SplitChapter(index, squeeze(section.title), len(items) + 1))
        groups = [paragraphs[:1], paragraphs[1:]] if heading else [paragraphs]
        for group in groups:
            items.extend(SplitItem(text, index) for text in _pack(group, max_chars))
    return SplitDocument(tuple(items), tuple(chapters))
