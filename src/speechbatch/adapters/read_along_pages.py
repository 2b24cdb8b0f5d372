"""An imported EPUB's own pages, made ready to be a read-along's: parsed (lxml, no
entities resolved, no DTD, no network; a reference to one of HTML's named characters
becomes that character), their scripts taken out, and every reference to a file the new
book does not carry (or to an id its page lacks) dropped, so the book stays valid:
a link keeps its text and loses its ``href``, an image or a stylesheet link goes.
Then each item's sentences (words where timed) are found in the pages' text and
wrapped in spans (``adapters/epub_spans``); an item whose pieces cannot be wrapped is
synced at its block element, and one whose text is not found is left unsynced."""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass, replace
from html.entities import html5, name2codepoint
from typing import Any
from urllib.parse import unquote, urlsplit

from lxml import etree

from speechbatch.adapters.epub import local_name
from speechbatch.adapters.epub_spans import XHTML, TextSlots
from speechbatch.domain.read_along import BookChapter, Clip, Passage

_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, recover=True, huge_tree=False
)
_REFERENCES = ("href", "src", "{http://www.w3.org/1999/xlink}href", "poster")
ANCHOR_PREFIX = "speechbatch-"  # our span ids, apart from the book's own
MAX_MISSES = 20  # passages in a row not found in the book before the rest are not sought


@dataclass
class BookPage:
    """One page of the book: its name (relative to the package file) and its tree."""

    name: str
    root: Any

    @property
    def body(self) -> Any:
        found = self.root.find(f"{{{XHTML}}}body")
        if found is None:
            found = etree.SubElement(self.root, f"{{{XHTML}}}body")
        return found


def _replace_entities(root: Any) -> None:
    """Put each entity reference the parser left (``&nbsp;`` of a page whose DTD it does
    not load) as its HTML character, in its place among the texts; drop one HTML does
    not name. The page is written without its DOCTYPE, so a reference left would make
    it not well-formed."""
    for entity in list(root.iter(etree.Entity)):
        parent = entity.getparent()
        if parent is None:
            continue
        name = entity.name
        if name in name2codepoint:
            character = chr(name2codepoint[name])
        else:
            character = html5.get(f"{name};", "")
        text = character + (entity.tail or "")
        before = entity.getprevious()
        if before is not None:
            before.tail = (before.tail or "") + text
        else:
            parent.text = (parent.text or "") + text
        parent.remove(entity)  # its tail goes with it: it was copied above


def parse_page(name: str, data: bytes, title: str) -> BookPage:
    """A page's tree, entity references replaced; a page that is not XHTML becomes an
    empty one (its text, unfound, is left unsynced) rather than failing the render."""
    try:
        root = etree.fromstring(data, _PARSER)
    except etree.XMLSyntaxError:
        root = None
    if root is None or root.tag != f"{{{XHTML}}}html":
        root = etree.Element(f"{{{XHTML}}}html", nsmap={None: XHTML})
    _replace_entities(root)
    head = root.find(f"{{{XHTML}}}head")
    if head is None:
        head = etree.Element(f"{{{XHTML}}}head")
        root.insert(0, head)
    if head.find(f"{{{XHTML}}}title") is None:
        etree.SubElement(head, f"{{{XHTML}}}title").text = title
    return BookPage(name, root)


def remove_keeping_tail(element: Any) -> None:
    """Take ``element`` out of its tree; the text that followed it stays."""
    parent = element.getparent()
    if parent is None:
        return
    if element.tail:
        before = element.getprevious()
        if before is not None:
            before.tail = (before.tail or "") + element.tail
        else:
            parent.text = (parent.text or "") + element.tail
    parent.remove(element)


def _target(page: str, value: str) -> tuple[str, str] | None:
    """(file relative to the package file, fragment) of a reference; None when remote."""
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return None
    if not parts.path:
        return page, parts.fragment
    path = posixpath.normpath(posixpath.join(posixpath.dirname(page), unquote(parts.path)))
    return path, parts.fragment


def clean_references(pages: list[BookPage], carried: set[str]) -> None:
    """Drop scripts, and references the new book cannot follow (see the module)."""
    ids = {page.name: {e.get("id") for e in page.root.iter() if e.get("id")} for page in pages}
    for page in pages:
        for element in list(page.root.iter()):
            if not isinstance(element.tag, str):
                continue
            name = local_name(element.tag)
            if name == "script":
                remove_keeping_tail(element)
                continue
            for attribute in _REFERENCES:
                value = element.get(attribute)
                if value is None:
                    continue
                target = _target(page.name, value)
                if target is None:
                    followable = name == "a"
                else:
                    path, fragment = target
                    followable = path in carried and (not fragment or fragment in ids.get(path, ()))
                if followable:
                    continue
                if name == "a":
                    del element.attrib[attribute]
                else:
                    remove_keeping_tail(element)
                    break


@dataclass(frozen=True)
class PlacedClip:
    """A clip of the overlay and the page its span (or block) is on."""

    page: int
    clip: Clip


def sync_pages(
    pages: list[BookPage], chapters: list[BookChapter], tick: Callable[[], None] = lambda: None
) -> tuple[list[PlacedClip], list[tuple[str, PlacedClip]]]:
    """Find and wrap every passage in the pages, in order: the clips in document order,
    and each chapter's title with its first clip (chapters with none are left out).
    ``tick`` is called before each passage (the render renews its lease, which it does
    only when a third of it has passed). Once MAX_MISSES passages in a row are not
    found, the rest are left unsynced: each miss searched to the end of the book, and a
    job edited beyond its book must not cost its items times the book's length."""
    slots = TextSlots([page.body for page in pages])
    placed: list[PlacedClip] = []
    firsts: list[tuple[str, PlacedClip]] = []
    cursor = misses = 0
    for chapter in chapters:
        count = len(placed)
        for passage in chapter.passages:
            if misses >= MAX_MISSES:
                break
            tick()
            found = slots.stream.find(passage.cue.text, cursor)
            if found is None:
                misses += 1
                continue
            cursor, misses = found[1], 0
            placed.extend(_sync_passage(slots, passage, *found))
        if len(placed) > count:
            firsts.append((chapter.title, placed[count]))
    slots.flush()
    return placed, firsts


def _sync_passage(slots: TextSlots, passage: Passage, start: int, end: int) -> list[PlacedClip]:
    """The passage's clips, each of its pieces wrapped where it is found within [start,
    end); a piece that cannot be is heard with the one before it (the first: after),
    and when none can be, the whole passage is synced at its block element."""
    out: list[PlacedClip] = []
    pending: int | None = None  # where unwrapped leading pieces began
    at = start
    for clip in passage.clips():
        anchor = ANCHOR_PREFIX + clip.anchor
        found = slots.stream.find(clip.text, at, end)
        if found is not None and slots.wrap(found[0], found[1], anchor):
            at = found[1]
            begin = pending if pending is not None and not out else clip.begin
            out.append(
                PlacedClip(slots.page_of(found[0]), replace(clip, anchor=anchor, begin=begin))
            )
        elif out:
            out[-1] = replace(out[-1], clip=replace(out[-1].clip, end=clip.end))
        elif pending is None:
            pending = clip.begin
    if out:
        return out
    block = slots.block_of(start)
    anchor = block.get("id") or ANCHOR_PREFIX + passage.anchor
    block.set("id", anchor)
    clips = passage.clips()
    whole = Clip(anchor, passage.cue.text, clips[0].begin, clips[-1].end)
    return [PlacedClip(slots.page_of(start), whole)]
