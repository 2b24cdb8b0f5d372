"""Reading an EPUB (``ebooklib``) into sections: one per entry of its table of contents,
or one per spine document when it has none.

Each spine document's XHTML is walked in order; block elements (paragraphs, headings,
list items, table cells, ...) end a paragraph; scripts, styles and images are left out.
A table of contents entry (``file.xhtml`` or ``file.xhtml#anchor``) starts its chapter at
that file, or at the element with that id.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import ebooklib
from ebooklib import epub
from lxml import etree, html

from speechbatch.adapters.documents import UnreadableDocument
from speechbatch.domain.documents import Section

_BLOCKS = frozenset(
    [
        "p",
        "div",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "li",
        "dt",
        "dd",
        "blockquote",
        "pre",
        "td",
        "th",
        "tr",
        "figcaption",
        "caption",
        "section",
        "article",
        "aside",
        "header",
        "footer",
        "nav",
        "br",
        "hr",
        "table",
        "ul",
        "ol",
        "dl",
        "body",
    ]
)
_HEADINGS = frozenset(["h1", "h2", "h3", "h4", "h5", "h6"])
_SKIPPED = frozenset(["script", "style", "img", "svg", "math", "head", "title"])


@dataclass
class _Walk:
    """Paragraphs of one XHTML document, and where each id'd element starts."""

    paragraphs: list[str] = field(default_factory=list)
    headings: set[int] = field(default_factory=set)
    anchors: dict[str, int] = field(default_factory=dict)
    current: list[str] = field(default_factory=list)
    heading: bool = False

    def flush(self) -> None:
        text = "".join(self.current)
        if text.strip():
            if self.heading:
                self.headings.add(len(self.paragraphs))
            self.paragraphs.append(text)
        self.current = []
        self.heading = False


def _local(tag: Any) -> str:
    return etree.QName(tag).localname.lower() if isinstance(tag, str) else ""


def _walk(element: Any, walk: _Walk) -> None:
    tag = _local(element.tag)
    if tag in _SKIPPED or not isinstance(element.tag, str):
        if element.tail:
            walk.current.append(element.tail)
        return
    block = tag in _BLOCKS
    if block:
        walk.flush()
    ident = element.get("id")
    if ident is not None:
        walk.anchors.setdefault(ident, len(walk.paragraphs))
    walk.heading = walk.heading or tag in _HEADINGS
    if element.text:
        walk.current.append(element.text)
    for child in element:
        _walk(child, walk)
    if block:
        walk.flush()
    if element.tail:
        walk.current.append(element.tail)


def _paragraphs(content: bytes) -> _Walk:
    walk = _Walk()
    if not content.strip():
        return walk
    root = html.document_fromstring(content)
    body = root.find(".//body")
    _walk(body if body is not None else root, walk)
    walk.flush()
    return walk


def _toc_entries(toc: Any) -> Iterator[tuple[str, str]]:
    """(title, href) of every table of contents entry, depth first."""
    for entry in toc if isinstance(toc, list | tuple) else [toc]:
        if isinstance(entry, tuple | list):
            section, children = entry[0], entry[1]
            if getattr(section, "href", None):
                yield section.title or "", section.href
            yield from _toc_entries(children)
        elif getattr(entry, "href", None):
            yield entry.title or "", entry.href


def _open(data: bytes) -> epub.EpubBook:
    try:
        return epub.read_epub(io.BytesIO(data), options={"ignore_ncx": False})
    except Exception as exc:
        # ebooklib lets whatever a broken archive causes escape (KeyError, AttributeError,
        # lxml's errors, ...): every one of them means the upload is not a readable EPUB.
        raise UnreadableDocument(
            f"the file is not a readable EPUB ({type(exc).__name__}: {exc})"[:300], field="file"
        ) from None


def _is_nav(item: Any) -> bool:
    """The EPUB 3 navigation page: the table of contents itself, not the book's text."""
    return isinstance(item, epub.EpubNav) or "nav" in (getattr(item, "properties", None) or [])


def read_epub(data: bytes, title: str) -> list[Section]:
    """The sections of an EPUB: its table of contents' chapters, else its spine's files."""
    book = _open(data)
    starts: dict[tuple[str, str], str] = {}
    for entry_title, href in _toc_entries(book.toc):
        name, _, anchor = href.partition("#")
        starts.setdefault((name, anchor), entry_title)
    sections: list[Section] = []
    paragraphs: list[str] = []
    current_title, heading = title, False

    def close() -> None:
        if paragraphs:
            sections.append(Section(current_title, tuple(paragraphs), heading))

    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT or _is_nav(item):
            continue
        try:
            walk = _paragraphs(item.get_content())
        except (etree.LxmlError, ValueError) as exc:
            raise UnreadableDocument(
                f"the EPUB has a malformed page ({exc})", field="file"
            ) from None
        # Without a table of contents every spine file is a chapter ("" names it below).
        cuts = {0: starts.get((item.get_name(), ""))} if starts else {0: ""}
        for (name, anchor), entry_title in starts.items():
            if name == item.get_name() and anchor in walk.anchors:
                cuts[walk.anchors[anchor]] = entry_title
        for n, text in enumerate(walk.paragraphs):
            if cuts.get(n) is not None:
                close()
                heading = n in walk.headings
                current_title, paragraphs = cuts[n] or (text if heading else title), []
            paragraphs.append(text)
    close()
    return sections
