"""Reading an uploaded document (``.txt``, ``.md``, ``.epub``) into sections of spoken text.

Markdown goes through ``markdown-it-py`` (CommonMark plus tables): headings of level 1 and
2 open chapters; markup is removed, link text and inline code kept, images, code blocks
and raw HTML left out. EPUB is in ``adapters/epub``. Splitting into items is the domain's
(``domain/documents``). Every reader works within a ``ReadBudget``
(``adapters/document_bounds``): Markdown is refused past its size, lines, tokens, nesting
or the clock (two rules added in front of markdown-it's own check them as it goes), and
``read_document`` is the one place where whatever a reader raised becomes a sentence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock
from markdown_it.rules_core import StateCore
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from speechbatch.adapters.document_bounds import (
    MAX_MARKDOWN_LINES,
    MAX_NESTING,
    MAX_TEXT_BYTES,
    READ_SECONDS,
    ReadBudget,
    UnreadableDocument,
    explain,
    size_in_words,
    too_large,
)
from speechbatch.adapters.epub import read_epub
from speechbatch.domain.documents import Book, Section

__all__ = [
    "DOCUMENT_SUFFIXES", "UnreadableDocument", "document_kind", "read_book", "read_document",
    "read_script",
]  # fmt: skip

DOCUMENT_SUFFIXES = (".txt", ".md", ".markdown", ".epub")
_CHAPTER_HEADINGS = ("h1", "h2")
# Inline tokens whose content is spoken; everything else inline is markup (emphasis,
# link and HTML tags) or left out (images).
_SPOKEN_INLINE = ("text", "code_inline")
_BREAKS = ("softbreak", "hardbreak")
# markdown-it drops what lies deeper than its maxNesting without a word; the budget rule
# refuses at MAX_NESTING, which a construct cannot jump past by this margin.
_NESTING_MARGIN = 10


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
    raise UnreadableDocument("unsupported file type: upload a .txt, .md or .epub document")


def read_document(
    filename: str, data: bytes, title: str, *, read_seconds: float = READ_SECONDS
) -> list[Section]:
    """The sections of an uploaded document; ``title`` names a chapter without a heading."""
    return list(read_book(filename, data, title, read_seconds=read_seconds).sections)


def read_book(
    filename: str, data: bytes, title: str, *, read_seconds: float = READ_SECONDS
) -> Book:
    """An uploaded document's sections, and its own title and author where it has them
    (an EPUB's metadata, a Markdown document's first level-1 heading); ``title`` names a
    chapter without a heading.

    Whatever a reader raises (a parser's own exception included) leaves here as an
    ``UnreadableDocument`` whose message says in words what is wrong with the file."""
    kind = document_kind(filename, data)
    budget = ReadBudget(read_seconds)
    readers: dict[str, Callable[[bytes, str, ReadBudget], Book]] = {
        "epub": read_epub,
        "md": read_markdown,
        "txt": read_text,
    }
    try:
        return readers[kind](data, title, budget)
    except Exception as exc:
        raise explain(kind, exc) from None


def read_script(filename: str, data: bytes) -> tuple[str, bool]:
    """The text of an uploaded script and whether it is Markdown; a script is a .txt or
    .md file (an EPUB, or a file that is not UTF-8 text, is refused in words)."""
    kind = document_kind(filename, data)
    if kind == "epub":
        raise UnreadableDocument("a script is a .txt or .md file of NAME: text lines")
    try:
        return _decode(data).replace("\r\n", "\n"), kind == "md"
    except Exception as exc:
        raise explain(kind, exc) from None


def _decode(data: bytes) -> str:
    if len(data) > MAX_TEXT_BYTES:
        raise too_large(f"the file is {size_in_words(len(data))}", size_in_words(MAX_TEXT_BYTES))
    return data.decode("utf-8-sig")


def _blank_line_paragraphs(text: str) -> Iterator[str]:
    """The paragraphs between blank lines, one at a time (a list of them all at once
    could be a few hundred megabytes for a file of one-character paragraphs)."""
    start = 0
    while start <= len(text):
        end = text.find("\n\n", start)
        end = len(text) if end < 0 else end
        if text[start:end].strip():
            yield text[start:end]
        start = end + 2


def read_text(data: bytes, title: str, budget: ReadBudget) -> Book:
    """A plain text file: one chapter, paragraphs separated by blank lines."""
    paragraphs = []
    for paragraph in _blank_line_paragraphs(_decode(data).replace("\r\n", "\n")):
        budget.spend_paragraph(paragraph)
        paragraphs.append(paragraph)
    return Book((Section(title, tuple(paragraphs)),))


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


def _block_budget(state: StateBlock, _start: int, _end: int, _silent: bool) -> bool:
    """First of the block rules, before each block: nesting, tokens, the clock."""
    budget: ReadBudget = state.env["budget"]
    if state.level >= MAX_NESTING:
        raise UnreadableDocument(
            f"the Markdown is nested more than {MAX_NESTING} levels deep (quotes or lists "
            "inside each other)"
        )
    budget.check_tokens(len(state.tokens))
    budget.tick()
    return False


def _inline_budget(state: StateInline, _silent: bool) -> bool:
    """First of the inline rules, at each step of an inline scan: tokens, the clock."""
    budget: ReadBudget = state.env["budget"]
    budget.check_tokens(budget.tokens + len(state.tokens))
    budget.tick()
    return False


def _inline_within_budget(state: StateCore) -> None:
    """markdown-it's core ``inline`` rule, counting the tokens each block's inline makes."""
    budget: ReadBudget = state.env["budget"]
    budget.tokens = len(state.tokens)
    for token in state.tokens:
        if token.type == "inline":
            token.children = []
            state.md.inline.parse(token.content, state.md, state.env, token.children)
            budget.tokens += len(token.children)
            budget.check_tokens(budget.tokens)


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING + _NESTING_MARGIN}).enable("table")
    md.block.ruler.before("table", "budget", _block_budget)
    md.inline.ruler.before("text", "budget", _inline_budget)
    md.core.ruler.at("inline", _inline_within_budget)
    return md


def _parse(text: str, budget: ReadBudget) -> list[Token]:
    lines = text.count("\n")
    if lines > MAX_MARKDOWN_LINES:
        raise too_large(f"it has {lines:,} lines", f"{MAX_MARKDOWN_LINES:,} lines")
    env: dict[str, Any] = {"budget": budget}
    return _parser().parse(text, env)


def read_markdown(data: bytes, title: str, budget: ReadBudget) -> Book:
    """A Markdown document: a chapter per heading of level 1 or 2 (text before the
    first heading is a chapter named ``title``); each inline block is a paragraph. Its
    own title is its first level-1 heading."""
    sections: list[Section] = []
    paragraphs: list[str] = []
    current_title, heading = title, False
    own_title: str | None = None
    tokens = _parse(_decode(data), budget)
    for n, token in enumerate(tokens):
        if token.type != "inline":
            continue
        spoken = _inline_text(token.children or [])
        budget.spend_paragraph(spoken)
        opener = tokens[n - 1] if n else None
        if opener is not None and opener.type == "heading_open" and opener.tag in _CHAPTER_HEADINGS:
            if paragraphs:
                sections.append(Section(current_title, tuple(paragraphs), heading))
            current_title, paragraphs, heading = spoken.strip() or title, [spoken], True
            if own_title is None and opener.tag == "h1" and spoken.strip():
                own_title = " ".join(spoken.split())
            continue
        paragraphs.append(spoken)
    if paragraphs:
        sections.append(Section(current_title, tuple(paragraphs), heading))
    return Book(tuple(sections), own_title)
