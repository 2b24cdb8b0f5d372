"""A read-along EPUB 3 made of the imported EPUB's own pages, images, styles and fonts.

The source is read within bounds (``adapters/epub_package``); its spine's pages (those
the import read) are copied with spans around each item's sentences or words
(``adapters/read_along_pages``), and one SMIL overlay per page syncs them to the
render's MP3. What the new book adds (its navigation, overlays, audio, the active
class's style, the job's cover when the book has none) lives in a folder of its own
beside the package file, so the book's own relative links keep working. The package is
new: a new identifier, the job's title and author, the voice's language.

Every name the new archive holds is checked once (``_Entries``): inside the archive, not
the mimetype, not under ``META-INF/`` nor the new book's own folder, and given once, case
aside. A resource whose name fails is left out; a page or a package file whose name
fails makes the plain book (``UnsafeName``), as an unreadable source does."""

from __future__ import annotations

import posixpath
import re
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lxml import etree

from speechbatch.adapters.document_bounds import ReadBudget
from speechbatch.adapters.epub_package import Package
from speechbatch.adapters.read_along_pages import (
    BookPage,
    PlacedClip,
    clean_references,
    parse_page,
    sync_pages,
)
from speechbatch.domain import read_along as book

OWN = "speechbatch"  # the folder of what the read-along adds, beside the package file
READ_SECONDS = 120.0  # a render reads a book it has read at import, with room to spare
CARRIED_TYPES = frozenset(
    ["image/gif", "image/jpeg", "image/png", "image/svg+xml", "text/css", "font/otf",
     "font/ttf", "font/woff", "font/woff2", "application/font-sfnt", "application/font-woff",
     "application/vnd.ms-opentype"]
)  # fmt: skip
_SVG = "{http://www.w3.org/2000/svg}svg"
_MATH = "{http://www.w3.org/1998/Math/MathML}math"
_OPF, _DC, _SMIL = f"{{{book.OPF}}}", f"{{{book.DC}}}", f"{{{book.SMIL}}}"
_X = f"{{{book.XHTML}}}"
# Characters OCF forbids in a file name that a ZIP entry would still carry (a NUL would
# even cut the name short, so that two names became one).
_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f\\]")


@dataclass(frozen=True)
class Resource:
    """An image, style sheet or font of the book: its name, type and properties."""

    name: str
    media_type: str
    cover: bool
    entry: zipfile.ZipInfo


class NothingFound(Exception):
    """None of the items' text is in the book's pages (a job edited beyond them)."""


class UnsafeName(Exception):
    """A page's or the package file's name cannot be an entry of the new archive (it
    climbs out of it, or takes a name the new book writes itself)."""


def _holdable(path: str) -> bool:
    """Whether a normalized archive path can name an entry: relative, inside the archive,
    a file's, neither the mimetype nor under META-INF/ (the new book writes those)."""
    folded = path.casefold()
    parts = folded.split("/")
    return not (
        folded.startswith("/")
        or ".." in parts
        or folded in ("", ".", "mimetype")
        or parts[0] == "meta-inf"
        or _FORBIDDEN.search(path)
    )


class _Entries:
    """The new archive's entry names: each one checked, and each given once (case aside,
    as OCF asks), so that no entry of the book overwrites another or one of ours."""

    def __init__(self, opf_path: str) -> None:
        if not _holdable(opf_path):
            raise UnsafeName(f"the package file's name {opf_path[:100]!r} is not an entry's")
        self.base = posixpath.dirname(opf_path)
        self._own = self.path(OWN).casefold()
        self._taken = {opf_path.casefold()}

    def path(self, name: str) -> str:
        """The archive path of a name relative to the package file."""
        return posixpath.normpath(posixpath.join(self.base, name))

    def claim(self, name: str) -> bool:
        """Whether ``name`` (relative to the package file) can be an entry of its own:
        holdable, outside the new book's own folder, not taken; if so it is now taken."""
        path = self.path(name)
        folded = path.casefold()
        if (
            not _holdable(path)
            or folded in self._taken
            or folded == self._own
            or folded.startswith(f"{self._own}/")
        ):
            return False
        self._taken.add(folded)
        return True


def _resources(package: Package, entries: _Entries) -> list[Resource]:
    """The images, styles and fonts carried: those of a holdable name not yet taken."""
    found: list[Resource] = []
    for href, media_type, properties in package.manifest.values():
        name = posixpath.normpath(href)
        if media_type not in CARRIED_TYPES:
            continue
        entry = package.resource(href)
        if entry is not None and entries.claim(name):
            found.append(Resource(name, media_type, "cover-image" in properties, entry))
    return found


def _pages(package: Package, title: str, entries: _Entries) -> list[BookPage]:
    """The spine's pages, each once; UnsafeName when one's name cannot be an entry."""
    pages: dict[str, BookPage] = {}
    for page in package.pages():
        if page.name in pages:
            continue
        if not entries.claim(page.name):
            raise UnsafeName(f"the page's name {page.name[:100]!r} is not an entry's")
        pages[page.name] = parse_page(page.name, b"".join(package.read_page(page)), title)
    return list(pages.values())


def _relative(name: str, start: str = OWN) -> str:
    return quote(posixpath.relpath(name, start))


def _link_style(page: BookPage) -> None:
    head = page.root.find(f"{_X}head")
    href = _relative(f"{OWN}/read-along.css", posixpath.dirname(page.name) or ".")
    etree.SubElement(head, f"{_X}link", rel="stylesheet", type="text/css", href=href)


def _page_properties(page: BookPage) -> str | None:
    found = []
    if page.root.find(f".//{_SVG}") is not None:
        found.append("svg")
    if page.root.find(f".//{_MATH}") is not None:
        found.append("mathml")
    return " ".join(found) or None


def _overlay(page: BookPage, clips: list[PlacedClip]) -> bytes:
    smil = etree.Element(f"{_SMIL}smil", nsmap={None: book.SMIL}, version="3.0")
    body = etree.SubElement(smil, f"{_SMIL}body")
    for n, placed in enumerate(clips, 1):
        clip = placed.clip
        par = etree.SubElement(body, f"{_SMIL}par", id=f"par-{n}")
        etree.SubElement(par, f"{_SMIL}text", src=f"{_relative(page.name)}#{clip.anchor}")
        etree.SubElement(
            par, f"{_SMIL}audio", src="book.mp3",
            clipBegin=book.clock(clip.begin), clipEnd=book.clock(clip.end),
        )  # fmt: skip
    return bytes(etree.tostring(smil, xml_declaration=True, encoding="utf-8"))


def _nav(
    title: str, language: str, pages: list[BookPage], firsts: list[tuple[str, PlacedClip]]
) -> bytes:
    html = etree.Element(f"{_X}html", nsmap={None: book.XHTML, "epub": book.OPS})
    html.set(book.XML_LANG, language)
    head = etree.SubElement(html, f"{_X}head")
    etree.SubElement(head, f"{_X}title").text = title
    nav = etree.SubElement(etree.SubElement(html, f"{_X}body"), f"{_X}nav", id="toc")
    nav.set(f"{{{book.OPS}}}type", "toc")
    etree.SubElement(nav, f"{_X}h1").text = "Contents"
    listed = etree.SubElement(nav, f"{_X}ol")
    for number, (chapter_title, placed) in enumerate(firsts, 1):
        href = f"{_relative(pages[placed.page].name)}#{placed.clip.anchor}"
        link = etree.SubElement(etree.SubElement(listed, f"{_X}li"), f"{_X}a", href=href)
        link.text = chapter_title.strip() or f"Chapter {number}"  # a link must have text
    return bytes(etree.tostring(html, xml_declaration=True, encoding="utf-8"))


@dataclass(frozen=True)
class _Book:
    """What the package lists: the pages, each one's overlay clips, the resources."""

    info: book.BookInfo
    pages: list[BookPage]
    overlays: list[list[PlacedClip]]
    resources: list[Resource]
    nav: bytes

    def milliseconds(self, index: int) -> int:
        return sum(p.clip.end - p.clip.begin for p in self.overlays[index])


def _item(manifest: Any, item_id: str, href: str, media_type: str, **extra: str | None) -> None:
    attributes = {"id": item_id, "href": href, "media-type": media_type}
    attributes |= {key.replace("_", "-"): value for key, value in extra.items() if value}
    etree.SubElement(manifest, f"{_OPF}item", attributes)


def _metadata(package: Any, made: _Book) -> None:
    info = made.info
    meta = etree.SubElement(package, f"{_OPF}metadata", nsmap={"dc": book.DC})
    etree.SubElement(meta, f"{_DC}identifier", id="uid").text = info.identifier
    etree.SubElement(meta, f"{_DC}title").text = info.title
    etree.SubElement(meta, f"{_DC}language").text = info.language
    if info.author:
        etree.SubElement(meta, f"{_DC}creator").text = info.author
    values: list[tuple[str, str, str | None]] = [("dcterms:modified", info.modified, None)]
    for index, clips in enumerate(made.overlays):
        if clips:
            values.append(
                ("media:duration", book.clock(made.milliseconds(index)), f"#smil-{index + 1}")
            )
    total = sum(made.milliseconds(i) for i in range(len(made.pages)))
    values.append(("media:duration", book.clock(total), None))
    if info.narrator:
        values.append(("media:narrator", info.narrator, None))
    values.append(("media:active-class", book.ACTIVE_CLASS, None))
    for prop, text, refines in values:
        element = etree.SubElement(meta, f"{_OPF}meta", property=prop)
        if refines:
            element.set("refines", refines)
        element.text = text


def _package_opf(made: _Book) -> bytes:
    package = etree.Element(
        f"{_OPF}package", nsmap={None: book.OPF}, version="3.0", **{"unique-identifier": "uid"}
    )
    package.set(book.XML_LANG, made.info.language)
    _metadata(package, made)
    manifest = etree.SubElement(package, f"{_OPF}manifest")
    xhtml = "application/xhtml+xml"
    _item(manifest, "speechbatch-nav", f"{OWN}/nav.xhtml", xhtml, properties="nav")
    _item(manifest, "speechbatch-style", f"{OWN}/read-along.css", "text/css")
    _item(manifest, "speechbatch-audio", f"{OWN}/book.mp3", "audio/mpeg")
    if made.info.cover_name and made.info.cover_type:
        cover = f"{OWN}/{made.info.cover_name}"
        _item(manifest, "speechbatch-cover", cover, made.info.cover_type, properties="cover-image")
    spine = etree.SubElement(package, f"{_OPF}spine")
    for index, page in enumerate(made.pages, 1):
        overlay = f"smil-{index}" if made.overlays[index - 1] else None
        _item(
            manifest, f"page-{index}", quote(page.name), xhtml,
            properties=_page_properties(page), media_overlay=overlay,
        )  # fmt: skip
        if overlay:
            _item(manifest, overlay, f"{OWN}/page-{index}.smil", "application/smil+xml")
        etree.SubElement(spine, f"{_OPF}itemref", idref=f"page-{index}")
    for index, resource in enumerate(made.resources, 1):
        properties = "cover-image" if resource.cover else None
        _item(
            manifest,
            f"resource-{index}",
            quote(resource.name),
            resource.media_type,
            properties=properties,
        )
    return bytes(etree.tostring(package, xml_declaration=True, encoding="utf-8"))


def _made(
    source: bytes,
    info: book.BookInfo,
    chapters: list[book.BookChapter],
    renew: Callable[[], None],
) -> tuple[_Book, Package]:
    """The book's pages, synced, and what it carries; NothingFound when no text is."""
    package = Package(source, ReadBudget(READ_SECONDS))
    entries = _Entries(package.opf_path)
    pages = _pages(package, info.title, entries)
    names = {page.name for page in pages}
    resources = _resources(package, entries)
    clean_references(pages, names | {r.name for r in resources})
    renew()
    placed, firsts = sync_pages(pages, chapters, renew)
    if not placed:
        raise NothingFound
    overlays: list[list[PlacedClip]] = [[] for _ in pages]
    for clip in placed:
        if clip.clip.end > clip.clip.begin:
            overlays[clip.page].append(clip)
    for page in pages:
        _link_style(page)
    if any(r.cover for r in resources):  # the book's own cover, not the job's
        info = replace(info, cover_name=None, cover_type=None)
    nav = _nav(info.title, info.language, pages, firsts)
    return _Book(info, pages, overlays, resources, nav), package


def write_source_read_along(
    path: Path,
    audio: Path,
    info: book.BookInfo,
    cover: bytes | None,
    chapters: list[book.BookChapter],
    source: bytes,
    renew: Callable[[], None],
) -> None:
    """Write at ``path`` the EPUB of ``source`` (the imported EPUB) with ``chapters``
    synced to ``audio``; NothingFound (nothing written) when no item's text is in it,
    UnsafeName when a page's name cannot be an entry, and whatever the source's reading
    raises when it cannot be read."""
    made, package = _made(source, info, chapters, renew)
    base = posixpath.dirname(package.opf_path)

    def inside(name: str) -> str:  # a name relative to the package file, as an entry's
        return posixpath.normpath(posixpath.join(base, name))

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as epub:
        epub.writestr(zipfile.ZipInfo("mimetype"), b"application/epub+zip", zipfile.ZIP_STORED)
        epub.writestr("META-INF/container.xml", book.container_xml(package.opf_path))
        epub.writestr(package.opf_path, _package_opf(made))
        epub.writestr(inside(f"{OWN}/nav.xhtml"), made.nav)
        epub.writestr(
            inside(f"{OWN}/read-along.css"),
            f".{book.ACTIVE_CLASS} {{ background-color: #ffef9f; }}\n",
        )
        for index, page in enumerate(made.pages, 1):
            renew()
            epub.writestr(
                inside(page.name), etree.tostring(page.root, xml_declaration=True, encoding="utf-8")
            )
            if made.overlays[index - 1]:
                epub.writestr(
                    inside(f"{OWN}/page-{index}.smil"), _overlay(page, made.overlays[index - 1])
                )
        for resource in made.resources:
            renew()
            with (
                package.open_resource(resource.entry) as source_file,
                epub.open(inside(resource.name), "w") as out,
            ):
                shutil.copyfileobj(source_file, out)
        if made.info.cover_name and cover:
            epub.writestr(inside(f"{OWN}/{made.info.cover_name}"), cover, zipfile.ZIP_STORED)
        epub.write(audio, inside(f"{OWN}/book.mp3"), zipfile.ZIP_STORED)
