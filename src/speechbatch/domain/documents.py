"""A document's text cut into items: chapters, paragraphs and sentences, nothing dropped.

The parsers (``adapters/documents``) turn a file into ``Section``s of spoken text; this
module packs them into items of at most ``max_chars`` characters. The invariant every
caller relies on: the items' texts joined by spaces equal the sections' texts joined by
spaces, up to whitespace, and no word is cut (a single word longer than ``max_chars``,
which no language has, is the one exception: it is cut, because it cannot be said whole).
No sentence that fits an item is cut; paragraphs that share an item keep a blank line
between them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pysbd

from speechbatch.domain.cutting import clause_pieces, inner_sentences

_SPACE = re.compile(r"\s+")
# pysbd's time grows with the square of a text's sentences, and even in small pieces it
# reads only about 50,000 characters a second: a long paragraph is given to it in windows
# (at least twice an item, so a sentence that fits an item is never cut at a window's
# end), and a document at most SENTENCE_BUDGET characters in all. Past the budget (only a
# document of very long paragraphs gets there) sentences end at . ! ? and their quotes.
SENTENCE_WINDOW = 3_000
SENTENCE_BUDGET = 100_000
# Between two paragraphs that share an item: a blank line, which a render speaks as a pause.
PARAGRAPH_BREAK = "\n\n"
_SENTENCE_END = re.compile(r"(?<=[.!?\u2026])[\"'\u201d\u2019)\]]* ")


@dataclass(frozen=True)
class Section:
    """One chapter's spoken text: its title, and its paragraphs in reading order.

    ``heading`` says the first paragraph is the chapter's heading, which stands alone as
    the chapter's first item (Markdown headings; an EPUB chapter that opens with one).
    ``matter`` says it is front or back matter (a cover, title page, imprint, colophon or
    copyright page), which an import leaves out unless asked for.
    """

    title: str
    paragraphs: tuple[str, ...]
    heading: bool = False
    matter: bool = False

    @property
    def spoken(self) -> bool:
        """Whether the section has text to speak (a section without makes no chapter)."""
        return any(squeeze(p) for p in self.paragraphs)


@dataclass(frozen=True)
class Book:
    """A document as read: its sections, and its own title, author and cover image where
    it has them."""

    sections: tuple[Section, ...]
    title: str | None = None
    author: str | None = None
    cover: bytes | None = None


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


def plain_sentences(text: str) -> list[str]:
    """``text`` (squeezed) cut after every . ! ? or ellipsis (and their closing quotes)."""
    found, start = [], 0
    for end in _SENTENCE_END.finditer(text):
        found.append(text[start : end.end() - 1])
        start = end.end()
    return [*found, text[start:]] if start < len(text) else found


@dataclass
class _Sentences:
    """Cuts long paragraphs into sentences within a document's budget for pysbd."""

    max_chars: int
    budget: int = SENTENCE_BUDGET

    def __call__(self, paragraph: str) -> Iterator[str]:
        """The sentences of a squeezed paragraph: one window at a time, keeping a
        window's last sentence for the next one unless the window ends the paragraph."""
        size = max(SENTENCE_WINDOW, 2 * self.max_chars)
        at, end = 0, len(paragraph)
        while at < end:
            last = end - at <= size
            cut = end if last else paragraph.rfind(" ", at, at + size + 1)
            window = paragraph[at : cut if cut > at else at + size]
            found = self._split(window)
            if not last and len(found) > 1:
                found.pop()
            kept = " ".join(found)
            if not kept or not window.startswith(kept):  # nothing may be lost or doubled
                found, kept = [window], window
            yield from found
            at += len(kept)
            while at < end and paragraph[at] == " ":
                at += 1

    def _split(self, window: str) -> list[str]:
        if len(window) > self.budget:
            return plain_sentences(window)
        self.budget -= len(window)
        # A quotation is one sentence to pysbd: one longer than an item is read again by
        # its own full stops, so that the cut falls between its sentences.
        found = sentences(window)
        limit = self.max_chars
        return [p for s in found for p in (inner_sentences(s) if len(s) > limit else [s])]


def _pieces(paragraph: str, cutter: _Sentences) -> Iterator[str]:
    """A paragraph as pieces of at most ``max_chars``: whole, or by sentences, or a long
    sentence by its clauses (``domain/cutting``)."""
    max_chars = cutter.max_chars
    if len(paragraph) <= max_chars:
        yield paragraph
        return
    for sentence in cutter(paragraph):
        if len(sentence) <= max_chars:
            yield sentence
        else:
            yield from clause_pieces(sentence, max_chars)


def _pack(paragraphs: Iterable[str], cutter: _Sentences) -> Iterator[str]:
    """Paragraphs packed into items of at most ``max_chars``.

    Whole paragraphs share an item while they fit, a blank line between them (which a
    render speaks as a pause); a paragraph that does not fit the item being filled starts
    a new one (a paragraph break is the best place to cut), and one that is too long by
    itself is cut between sentences, then at clause ends, then at words.
    """
    max_chars = cutter.max_chars
    current = ""
    for paragraph in paragraphs:
        for n, piece in enumerate(_pieces(paragraph, cutter)):
            joint = PARAGRAPH_BREAK if n == 0 else " "
            if current and len(current) + len(joint) + len(piece) <= max_chars:
                current += joint + piece
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
    cutter = _Sentences(max_chars)
    for section in sections:
        heading = section.heading and bool(section.paragraphs and squeeze(section.paragraphs[0]))
        paragraphs = [p for p in (squeeze(p) for p in section.paragraphs) if p]
        if not paragraphs:
            continue
        index = len(chapters)
        chapters.append(SplitChapter(index, squeeze(section.title), len(items) + 1))
        groups = [paragraphs[:1], paragraphs[1:]] if heading else [paragraphs]
        for group in groups:
            items.extend(SplitItem(text, index) for text in _pack(group, cutter))
    return SplitDocument(tuple(items), tuple(chapters))


def line_pieces(lines: Iterable[str], max_chars: int) -> Iterator[list[str]]:
    """Each line, squeezed, as items of at most ``max_chars``: whole, or its sentences
    packed (cut at words when one is too long), with one sentence budget for them all."""
    cutter = _Sentences(max_chars)
    for line in lines:
        yield list(_pack([squeeze(line)], cutter))
