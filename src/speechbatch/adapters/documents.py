"""Reading an uploaded document (``.txt``, ``.md``, ``.epub``) into sections of spoken text.

Markdown goes through ``markdown-it-py`` (CommonMark plus tables): headings of level 1 and
2 open chapters; markup is removed, link text and inline code kept, images, code blocks
and raw HTML left out. EPUB is in ``adapters/epub``. Splitting into items is the domain's
(``domain/documents``).
"""

from __future__ import annotations

from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.token import Token

from speechbatch.domain.documents import Section
from speechbatch.errors import ValidationError

DOCUMENT_SUFFIXES = (".txt", ".md", ".markdown", ".epub")
_CHAPTER_HEADINGS = ("h1", "h2")
# Inline tokens whose content is spoken; everything else inline is markup (emphasis,
# link and HTML tags) or left out (images).
_SPOKEN_INLINE = ("text", "code_inline")
_BREAKS = ("softbreak", "hardbreak")


class UnreadableDocument(ValidationError):
    """The file is not a document that can be imported."""


def document_kind(filename: str, data: bytes = b"") -> str:
    """``txt``, ``md`` or ``epub`` from a file name (without a suffix, a ZIP archive is an
    EPUB and anything else text); 422 for any other suffix."""
    name = filename.lower()
    if "." not in name.rsplit("/", 1)[-1]:
        return "epub" if data.startswith(b"PK\x03\x04") else "txt"
    if name.endswith((".md", ".markdown")):
        return "md"
    if name.endswith(".txt"):
        return "txt"
    if name.endswith(".epub"):
        return "epub"
    raise UnreadableDocument(
        "unsupported file type: upload a .txt, .md or .epub document", field="file"
    )


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UnreadableDocument("the file is not UTF-8 text", field="file") from None


def read_document(filename: str, data: bytes, title: str) -> list[Section]:
    """The sections of an uploaded document; ``title`` names a chapter without a heading."""
    kind = document_kind(filename, data)
    if kind == "epub":
        from speechbatch.adapters.epub import read_epub

        return read_epub(data, title)
    text = _decode(data)
    if kind == "md":
        return read_markdown(text, title)
    return read_text(text, title)


def read_text(text: str, title: str) -> list[Section]:
    """A plain text file: one chapter, paragraphs separated by blank lines."""
    paragraphs = [p for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]
    return [Section(title, tuple(paragraphs))]


def _inline_text(children: Sequence[Token]) -> str:
    """The spoken text of an inline token's children."""
    parts: list[str] = []
    for child in children:
        # An image is one token whose alt text is in its own children: it is left out.
        if child.type in _SPOKEN_INLINE:
            parts.append(child.content)
        elif child.type in _BREAKS:
            parts.append(" ")
    return "".join(parts)


def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


def read_markdown(text: str, title: str) -> list[Section]:
    """A Markdown document: a chapter per heading of level 1 or 2 (text before the
    first heading is a chapter named ``title``); each inline block is a paragraph."""
    sections: list[Section] = []
    paragraphs: list[str] = []
    current_title, heading = title, False
    tokens = _parser().parse(text)
    for n, token in enumerate(tokens):
        if token.type != "inline":
            continue
        spoken = _inline_text(token.children or [])
        opener = tokens[n - 1] if n else None
        if opener is not None and opener.type == "heading_open" and opener.tag in _CHAPTER_HEADINGS:
            if paragraphs:
                sections.append(Section(current_title, tuple(paragraphs), heading))
            current_title, paragraphs, heading = spoken.strip() or title, [spoken], True
            continue
        paragraphs.append(spoken)
    if paragraphs:
        sections.append(Section(current_title, tuple(paragraphs), heading))
    return sections
