"""A read-along book (EPUB 3 with Media Overlays) as XML documents: the package, the
navigation, one XHTML and one SMIL document per chapter. Built with ElementTree (text is
escaped by the serializer); times are whole milliseconds, so each overlay's duration and
the book's total add up exactly. No I/O: ``adapters/read_along.py`` zips them.

Each item is a paragraph (an item of several paragraphs, a division of them) whose
sentences (words, where its take is timed by word) are spans of their own, each synced
to its clip: a clip runs from where its piece starts to where the next one starts (the
first from the item's start, the last to its end), so that an item plays through
without a jump, pauses included, as it did as one clip."""

from __future__ import annotations

import bisect
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from speechbatch.domain.paragraphs import paragraphs_of
from speechbatch.domain.renders import Cue

XHTML = "http://www.w3.org/1999/xhtml"
OPS = "http://www.idpf.org/2007/ops"
OPF = "http://www.idpf.org/2007/opf"
DC = "http://purl.org/dc/elements/1.1/"
SMIL = "http://www.w3.org/ns/SMIL"
CONTAINER = "urn:oasis:names:tc:opendocument:xmlns:container"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
AUDIO = "audio/book.mp3"
ACTIVE_CLASS = "-epub-media-overlay-active"
STYLE = (
    "body { font-family: serif; line-height: 1.5; margin: 1em; }\n"
    f".{ACTIVE_CLASS} {{ background-color: #ffef9f; }}\n"
)

ET.register_namespace("epub", OPS)
ET.register_namespace("dc", DC)


@dataclass(frozen=True)
class Clip:
    """One synced piece of an item: the id of its span, its text and its clip (ms)."""

    anchor: str
    text: str
    begin: int
    end: int


@dataclass(frozen=True)
class Passage:
    """One item of the book: its position (the paragraph's id), where it is heard, and
    its pieces (sentences or words, seconds in the file) in order."""

    position: int
    cue: Cue
    pieces: tuple[Cue, ...] = ()

    @property
    def anchor(self) -> str:
        """The id of its paragraph."""
        return f"item-{self.position}"

    def clips(self) -> list[Clip]:
        """Its pieces' spans and clips, which tile the item's clip; the item itself as
        one clip when it has no pieces. A piece that would play for no time (timed at
        the same moment as the next) keeps its span but has no clip."""
        first, last = _ms(self.cue.start), _ms(self.cue.end)
        if not self.pieces:
            return [Clip(self.anchor, self.cue.text, first, last)]
        begins = [first]
        for piece in self.pieces[1:]:
            begins.append(min(max(_ms(piece.start), begins[-1]), last))
        ends = [*begins[1:], last]
        return [
            Clip(f"{self.anchor}-{n}", piece.text, begin, end)
            for n, (piece, begin, end) in enumerate(zip(self.pieces, begins, ends, strict=True), 1)
        ]


@dataclass(frozen=True)
class BookChapter:
    """One chapter's title and passages, in order."""

    title: str
    passages: list[Passage]

    @property
    def milliseconds(self) -> int:
        """How long its overlay plays: the sum of its passages' clips."""
        return sum(c.end - c.begin for p in self.passages for c in p.clips())


@dataclass(frozen=True)
class BookInfo:
    """What the package says of the book."""

    identifier: str  # a URN, the same for every build of one render
    title: str
    author: str | None
    narrator: str | None
    language: str
    modified: str  # CCYY-MM-DDThh:mm:ssZ
    cover_name: str | None  # "cover.jpg" or "cover.png"
    cover_type: str | None


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def clock(ms: int) -> str:
    """A SMIL full clock value (H:MM:SS.mmm)."""
    return f"{ms // 3_600_000}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def _document(root: ET.Element, default: str) -> bytes:
    """The document with ``default`` as its default namespace. ElementTree's own
    ``default_namespace`` refuses attributes without a namespace, so the default one's
    elements are written by their local names under an ``xmlns`` of the root."""
    prefix = f"{{{default}}}"
    for element in root.iter():
        if element.tag.startswith(prefix):
            element.tag = element.tag[len(prefix) :]
    root.set("xmlns", default)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attributes: str) -> ET.Element:
    element = ET.SubElement(parent, tag, attributes)
    element.text = text
    return element


def _page(title: str, language: str) -> tuple[ET.Element, ET.Element]:
    html = ET.Element(f"{{{XHTML}}}html", {XML_LANG: language, "lang": language})
    head = _sub(html, f"{{{XHTML}}}head")
    _sub(head, f"{{{XHTML}}}title", title)
    _sub(head, f"{{{XHTML}}}link", rel="stylesheet", type="text/css", href="style.css")
    return html, _sub(html, f"{{{XHTML}}}body")


def chapter_name(index: int, extension: str) -> str:
    """The file of the ``index``-th chapter (from 0)."""
    return f"chapter-{index + 1:03d}.{extension}"


def chapter_xhtml(chapter: BookChapter, language: str) -> bytes:
    """The chapter's text: one paragraph per item, with its id (an item of several
    paragraphs is a division of them); an item that is the chapter's title (an
    imported heading) is its heading."""
    html, body = _page(chapter.title, language)
    section = _sub(body, f"{{{XHTML}}}section", **{f"{{{OPS}}}type": "chapter"})
    for n, passage in enumerate(chapter.passages):
        tag = "h1" if n == 0 and passage.cue.text == chapter.title else "p"
        _passage_blocks(section, passage, tag)
    return _document(html, XHTML)


def _passage_blocks(section: ET.Element, passage: Passage, tag: str) -> None:
    """The passage's paragraphs, its pieces' spans in the paragraph where each begins."""
    paragraphs = paragraphs_of(passage.cue.text) or [passage.cue.text]
    if len(paragraphs) == 1:
        blocks = [_sub(section, f"{{{XHTML}}}{tag}", id=passage.anchor)]
    else:
        division = _sub(section, f"{{{XHTML}}}div", id=passage.anchor)
        blocks = [_sub(division, f"{{{XHTML}}}p") for _ in paragraphs]
    if not passage.pieces:
        for block, text in zip(blocks, paragraphs, strict=True):
            block.text = text
        return
    ends, at = [], 0  # where each paragraph ends, in characters other than spaces
    for text in paragraphs:
        at += len("".join(text.split()))
        ends.append(at)
    done, last, span = 0, -1, None
    for clip in passage.clips():
        index = min(bisect.bisect_right(ends, done), len(blocks) - 1)
        if span is not None and index == last:
            span.tail = " "
        span = _sub(blocks[index], f"{{{XHTML}}}span", clip.text, id=clip.anchor)
        done, last = done + len("".join(clip.text.split())), index


def chapter_smil(index: int, chapter: BookChapter) -> bytes:
    """The chapter's overlay: each sentence (or word) with its clip of the book's audio."""
    smil = ET.Element(f"{{{SMIL}}}smil", version="3.0")
    body = _sub(smil, f"{{{SMIL}}}body")
    page = chapter_name(index, "xhtml")
    for passage in chapter.passages:
        for clip in passage.clips():
            if clip.end <= clip.begin and passage.pieces:
                continue
            par = _sub(body, f"{{{SMIL}}}par", id=f"par-{clip.anchor.removeprefix('item-')}")
            _sub(par, f"{{{SMIL}}}text", src=f"{page}#{clip.anchor}")
            _sub(
                par, f"{{{SMIL}}}audio", src=AUDIO,
                clipBegin=clock(clip.begin), clipEnd=clock(clip.end),
            )  # fmt: skip
    return _document(smil, SMIL)


def nav_xhtml(title: str, chapters: list[BookChapter], language: str) -> bytes:
    """The table of contents."""
    html, body = _page(title, language)
    nav = _sub(body, f"{{{XHTML}}}nav", id="toc", **{f"{{{OPS}}}type": "toc"})
    _sub(nav, f"{{{XHTML}}}h1", "Contents")
    listed = _sub(nav, f"{{{XHTML}}}ol")
    for index, chapter in enumerate(chapters):
        item = _sub(listed, f"{{{XHTML}}}li")
        _sub(item, f"{{{XHTML}}}a", chapter.title, href=chapter_name(index, "xhtml"))
    return _document(html, XHTML)


def _metadata(package: ET.Element, book: BookInfo, chapters: list[BookChapter]) -> None:
    meta = _sub(package, f"{{{OPF}}}metadata")
    _sub(meta, f"{{{DC}}}identifier", book.identifier, id="uid")
    _sub(meta, f"{{{DC}}}title", book.title)
    _sub(meta, f"{{{DC}}}language", book.language)
    if book.author:
        _sub(meta, f"{{{DC}}}creator", book.author)
    _sub(meta, f"{{{OPF}}}meta", book.modified, property="dcterms:modified")
    for index, chapter in enumerate(chapters):
        _sub(
            meta, f"{{{OPF}}}meta", clock(chapter.milliseconds),
            property="media:duration", refines=f"#smil-{index + 1:03d}",
        )  # fmt: skip
    total = sum(chapter.milliseconds for chapter in chapters)
    _sub(meta, f"{{{OPF}}}meta", clock(total), property="media:duration")
    if book.narrator:
        _sub(meta, f"{{{OPF}}}meta", book.narrator, property="media:narrator")
    _sub(meta, f"{{{OPF}}}meta", ACTIVE_CLASS, property="media:active-class")


def package_opf(book: BookInfo, chapters: list[BookChapter]) -> bytes:
    """The package document: metadata (with each overlay's duration), manifest, spine."""
    package = ET.Element(
        f"{{{OPF}}}package",
        {"version": "3.0", "unique-identifier": "uid", XML_LANG: book.language},
    )
    _metadata(package, book, chapters)
    manifest = _sub(package, f"{{{OPF}}}manifest")
    item = f"{{{OPF}}}item"
    xhtml = "application/xhtml+xml"
    _sub(manifest, item, id="nav", href="nav.xhtml", properties="nav", **{"media-type": xhtml})
    _sub(manifest, item, id="style", href="style.css", **{"media-type": "text/css"})
    _sub(manifest, item, id="audio", href=AUDIO, **{"media-type": "audio/mpeg"})
    if book.cover_name and book.cover_type:
        _sub(
            manifest, item, id="cover", href=book.cover_name, properties="cover-image",
            **{"media-type": book.cover_type},
        )  # fmt: skip
    spine = _sub(package, f"{{{OPF}}}spine")
    for index in range(len(chapters)):
        number = f"{index + 1:03d}"
        _sub(
            manifest, item, id=f"chapter-{number}", href=chapter_name(index, "xhtml"),
            **{"media-type": xhtml, "media-overlay": f"smil-{number}"},
        )  # fmt: skip
        _sub(
            manifest, item, id=f"smil-{number}", href=chapter_name(index, "smil"),
            **{"media-type": "application/smil+xml"},
        )  # fmt: skip
        _sub(spine, f"{{{OPF}}}itemref", idref=f"chapter-{number}")
    return _document(package, OPF)


def container_xml(package_path: str = "EPUB/package.opf") -> bytes:
    """META-INF/container.xml: where the package document is."""
    container = ET.Element(f"{{{CONTAINER}}}container", version="1.0")
    files = _sub(container, f"{{{CONTAINER}}}rootfiles")
    _sub(
        files, f"{{{CONTAINER}}}rootfile",
        **{"full-path": package_path, "media-type": "application/oebps-package+xml"},
    )  # fmt: skip
    return _document(container, CONTAINER)


_LANGUAGE = re.compile(r"^([a-z]{2})(?:[-_]([A-Za-z]{2}))?(?:$|[-_])")


def language_of(voice: str) -> str:
    """The book's language (BCP 47) from its voice's name: Piper's ``de_DE-thorsten-…``
    is de-DE, espeak's ``en-us`` en-US; a voice that says none (``alloy``) is English."""
    match = _LANGUAGE.match(voice.split(":")[-1])
    if match is None:
        return "en"
    region = match.group(2)
    return match.group(1) + (f"-{region.upper()}" if region else "")
