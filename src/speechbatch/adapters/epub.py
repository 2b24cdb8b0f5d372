"""Reading an EPUB into sections: one per entry of its table of contents, or one per
spine page when it has none.

The archive and the package are read within bounds by ``adapters/epub_package``. Each
spine page is parsed as it streams out of the archive by lxml's HTML parser with a
target (no tree is built, so a page's size costs no memory): block elements
(paragraphs, headings, list items, table cells, ...) end a paragraph; scripts, styles and
images are left out. A table of contents entry (``file.xhtml`` or ``file.xhtml#anchor``)
starts its chapter at that file, or at the element with that id. A chapter is front or
back matter when the guide or the landmarks name its page, when its page opens with an
element whose ``epub:type`` says so, or when its title is such a page's (``Colophon``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from lxml import etree

from speechbatch.adapters.document_bounds import ReadBudget
from speechbatch.adapters.epub_package import MATTER_TYPES, Package, Page
from speechbatch.domain.documents import Book, Section

BLOCK_TAGS = frozenset(
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
SKIPPED_TAGS = frozenset(["script", "style", "img", "svg", "math", "head", "title"])
_MATTER_TITLE = re.compile(
    r"(the )?(cover|title ?page|half[- ]?title|imprint|colophon|(un)?copyright( page)?|"
    r"table of contents|contents)",
    re.IGNORECASE,
)


@dataclass
class _Walk:
    """An lxml parser target: the paragraphs of one page, and where each id'd element
    starts. Events arrive in document order: start, text, children, end, tail."""

    budget: ReadBudget
    paragraphs: list[str] = field(default_factory=list)
    headings: set[int] = field(default_factory=set)
    anchors: dict[str, int] = field(default_factory=dict)
    current: list[str] = field(default_factory=list)
    heading: bool = False
    skipping: int = 0  # depth inside a left-out element
    matter: bool = False  # an element before the page's first text says it is matter

    def flush(self) -> None:
        text = "".join(self.current)
        if text.strip():
            self.budget.spend_paragraph(text)
            if self.heading:
                self.headings.add(len(self.paragraphs))
            self.paragraphs.append(text)
        self.current = []
        self.heading = False

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        self.budget.tick()
        name = local_name(tag)
        if self.skipping or name in SKIPPED_TAGS:
            self.skipping += 1
            return
        if name in BLOCK_TAGS:
            self.flush()
        kinds = set(attrib.get("epub:type", "").lower().split())
        if kinds & MATTER_TYPES and not self.paragraphs and not "".join(self.current).strip():
            self.matter = True
        ident = attrib.get("id")
        if ident is not None:
            self.anchors.setdefault(ident, len(self.paragraphs))
        self.heading = self.heading or name in _HEADINGS

    def end(self, tag: str) -> None:
        if self.skipping:
            self.skipping -= 1
        elif local_name(tag) in BLOCK_TAGS:
            self.flush()

    def data(self, text: str) -> None:
        if not self.skipping:
            self.current.append(text)

    def close(self) -> None:
        self.flush()


def local_name(tag: str) -> str:
    """A tag's name without its namespace or prefix, in lower case."""
    return tag.rpartition("}")[2].rpartition(":")[2].lower()


def _walk(package: Package, page: Page, budget: ReadBudget) -> _Walk:
    walk = _Walk(budget)
    parser = etree.HTMLParser(target=walk, no_network=True)
    for chunk in package.read_page(page):
        parser.feed(chunk)
        budget.check_clock()
    parser.close()
    return walk


def read_epub(data: bytes, title: str, budget: ReadBudget) -> Book:
    """The sections of an EPUB (its table of contents' chapters, else its spine's files),
    which of them are front or back matter, and its title and authors."""
    package = Package(data, budget)
    starts: dict[tuple[str, str], str] = {}
    for entry_title, href in package.table_of_contents():
        name, _, anchor = href.partition("#")
        starts.setdefault((name, anchor), entry_title)
    matter_pages = package.matter()
    sections: list[Section] = []
    paragraphs: list[str] = []
    current = Section(title, ())
    all_matter = True  # every page the section has text from is front or back matter

    def close() -> None:
        if paragraphs:
            matter = all_matter or _is_matter_title(current.title)
            sections.append(replace(current, paragraphs=tuple(paragraphs), matter=matter))

    for page in package.pages():
        walk = _walk(package, page, budget)
        # Without a table of contents every spine file is a chapter ("" names it below).
        cuts = {0: starts.get((page.name, ""))} if starts else {0: ""}
        for (name, anchor), entry_title in starts.items():
            if name == page.name and anchor in walk.anchors:
                cuts[walk.anchors[anchor]] = entry_title
        page_matter = page.name in matter_pages or walk.matter
        for n, text in enumerate(walk.paragraphs):
            if cuts.get(n) is not None:
                close()
                heading = n in walk.headings
                current = Section(cuts[n] or (text if heading else title), (), heading)
                paragraphs, all_matter = [], True
            paragraphs.append(text)
            all_matter = all_matter and page_matter
    close()
    return Book(tuple(sections), package.title, package.author, package.cover())


def _is_matter_title(title: str) -> bool:
    return _MATTER_TITLE.fullmatch(" ".join(title.split())) is not None
