"""An EPUB's archive and package, read within bounds.

Before anything is unpacked, the ZIP's directory is checked: its size and entry count
(from the end record, before ``zipfile`` parses a single entry), then every entry's
declared size, the total, and the ratio of unpacked to packed size. Then only what the
package references is read: ``META-INF/container.xml``, the package file it names, the
table of contents (the EPUB 3 navigation page, else the NCX) and, one at a time as the
reader asks, the pages of the spine. From the package file: the book's title and authors
(``dc:title``, ``dc:creator``), and which pages are front or back matter as its guide
says (the navigation page's landmarks say it too). Images, fonts and anything the package
does not name are never unpacked. ``zipfile`` stops every entry at its declared size (and fails its
checksum if the data goes on), and every byte read is counted in the ``ReadBudget``.
"""

from __future__ import annotations

import io
import posixpath
import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import unquote

from lxml import etree, html

from speechbatch.adapters.document_bounds import (
    MAX_CONTENT_BYTES,
    MIB,
    ReadBudget,
    UnreadableDocument,
    size_in_words,
    too_large,
)
from speechbatch.adapters.images import MAX_COVER_BYTES

MAX_ENTRIES = 10_000
MAX_DIRECTORY_BYTES = 4 * MIB
# Text packs about 3 to 1, XHTML up to 10 to 1; a thousand to one is a bomb.
MAX_RATIO = 100
RATIO_FROM_BYTES = MIB  # small entries may pack as well as they like
MAX_PACKAGE_FILE_BYTES = 4 * MIB  # the container, package and table of contents files
CHUNK_BYTES = MIB
_END_RECORD = struct.Struct("<4s4H2LH")
_END_SIGNATURE = b"PK\x05\x06"
_XML = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
_OPF = "{http://www.idpf.org/2007/opf}"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_PAGE_TYPES = ("application/xhtml+xml", "text/html")
# What a guide reference's ``type`` or a landmark's ``epub:type`` calls front or back
# matter that nobody listens to: covers, title pages, imprints, colophons, copyright pages
# (and, in EPUB 2's guide, the printed table of contents).
MATTER_TYPES = frozenset(
    ["cover", "titlepage", "title-page", "halftitlepage", "imprint", "colophon",
     "copyright-page", "toc"]
)  # fmt: skip
_METADATA_CHARACTERS = 1_000  # a title or an author is shorter than this

NOT_AN_EPUB = "the file is not a readable EPUB"


@dataclass(frozen=True)
class Page:
    """A page of the spine: its name (relative to the package file) and its entry."""

    name: str
    entry: zipfile.ZipInfo


def check_directory(data: bytes) -> None:
    """Refuse an archive whose directory alone is too large, before ``zipfile`` reads it."""
    at = data.rfind(_END_SIGNATURE, max(0, len(data) - 65_557))
    if at < 0 or len(data) - at < _END_RECORD.size:
        raise UnreadableDocument(f"{NOT_AN_EPUB}: it is not a ZIP archive")
    _sig, _disk, _cd_disk, _here, entries, directory_bytes, _at, _comment = _END_RECORD.unpack_from(
        data, at
    )
    if entries > MAX_ENTRIES or directory_bytes > MAX_DIRECTORY_BYTES:
        raise too_large("its archive has too many entries", f"{MAX_ENTRIES:,} entries")


def check_entries(infos: list[zipfile.ZipInfo]) -> None:
    """Refuse before unpacking: too many entries, a bomb, encryption, too much in all."""
    if len(infos) > MAX_ENTRIES:
        raise too_large("its archive has too many entries", f"{MAX_ENTRIES:,} entries")
    for info in infos:
        if info.file_size > RATIO_FROM_BYTES and info.file_size > MAX_RATIO * max(
            1, info.compress_size
        ):
            raise UnreadableDocument(
                f"{NOT_AN_EPUB}: its entry {info.filename[:100]} unpacks "
                f"{size_in_words(info.compress_size)} into {size_in_words(info.file_size)}, "
                f"more than {MAX_RATIO} times its size, as only a zip bomb does"
            )
        if info.flag_bits & 0x1:
            raise UnreadableDocument(
                f"{NOT_AN_EPUB}: it is encrypted (protected by DRM); import a copy without DRM"
            )
    total = sum(info.file_size for info in infos)
    if total > MAX_CONTENT_BYTES:
        raise UnreadableDocument(
            f"{NOT_AN_EPUB}: it unpacks to {size_in_words(total)}, more than the "
            f"{size_in_words(MAX_CONTENT_BYTES)} an import reads"
        )


class Package:
    """An open EPUB: its archive, its package file's manifest, spine and table of contents."""

    def __init__(self, data: bytes, budget: ReadBudget) -> None:
        check_directory(data)
        self._zip = zipfile.ZipFile(io.BytesIO(data))
        check_entries(self._zip.infolist())
        self._budget = budget
        root = self._xml("META-INF/container.xml").find(f".//{_CONTAINER}rootfile[@full-path]")
        if root is None:
            raise UnreadableDocument(f"{NOT_AN_EPUB}: its container names no package file")
        opf_path = unquote(root.get("full-path", ""))
        self.opf_path = posixpath.normpath(opf_path)
        self._opf_dir = posixpath.dirname(opf_path)
        opf = self._xml(opf_path)
        self.manifest = _manifest(opf)
        spine = opf.find(f"{_OPF}spine")
        if spine is None:
            raise UnreadableDocument(f"{NOT_AN_EPUB}: its package file has no spine")
        self._spine = [ref.get("idref", "") for ref in spine.iter(f"{_OPF}itemref")]
        self._ncx = self.manifest.get(spine.get("toc", ""))
        self.title = _metadata_text(opf, "title")
        creators = [_clean(c.text or "") for c in opf.iterfind(f"{_OPF}metadata/{_DC}creator")]
        self.author = ", ".join(c for c in creators if c)[:_METADATA_CHARACTERS] or None
        self._guide = [
            (ref.get("type", "").lower(), _relative("", ref.get("href", "")))
            for ref in opf.iterfind(f"{_OPF}guide/{_OPF}reference")
        ]
        self._nav: Any = None
        cover_meta = opf.find(f"{_OPF}metadata/{_OPF}meta[@name='cover']")
        self._cover_id = cover_meta.get("content", "") if cover_meta is not None else ""

    def pages(self) -> Iterator[Page]:
        """The spine's pages in reading order (not the navigation page, not images)."""
        for idref in self._spine:
            item = self.manifest.get(idref)
            if item is None or item[1] not in _PAGE_TYPES or "nav" in item[2]:
                continue
            yield Page(posixpath.normpath(item[0]), self._info(self._path(item[0])))

    def read_page(self, page: Page) -> Iterator[bytes]:
        """A page's bytes, a chunk at a time, each counted in the budget."""
        with self._zip.open(page.entry) as stream:
            while chunk := stream.read(CHUNK_BYTES):
                self._budget.spend_bytes(len(chunk))
                yield chunk

    def table_of_contents(self) -> list[tuple[str, str]]:
        """(title, href relative to the package file) of every entry, depth first: from
        the EPUB 3 navigation page, else from the NCX, else none."""
        nav = self._nav_page()
        if nav is not None:
            name, page = nav
            return [(title, _relative(name, href)) for title, href in _nav_entries(page)]
        if self._ncx is not None:
            ncx = self._xml(self._path(self._ncx[0]))
            return [(title, _relative(self._ncx[0], src)) for title, src in _ncx_entries(ncx)]
        return []

    def matter(self) -> set[str]:
        """The names (relative to the package file, as ``Page.name``) of the pages that
        the guide or the navigation page's landmarks call front or back matter."""
        found = {href.partition("#")[0] for kind, href in self._guide if kind in MATTER_TYPES}
        nav = self._nav_page()
        if nav is not None:
            name, page = nav
            for landmarks in _navs(page, "landmarks"):
                for link in landmarks.iter("a"):
                    kinds = set(link.get("epub:type", "").lower().split())
                    if kinds & MATTER_TYPES and link.get("href"):
                        found.add(_relative(name, link.get("href")).partition("#")[0])
        return found

    def cover(self) -> bytes | None:
        """The cover image's bytes (the manifest's ``cover-image``, else the item EPUB 2's
        ``<meta name="cover">`` names), when it is a JPEG or PNG of at most
        MAX_COVER_BYTES; None otherwise (a book without a cover is still a book)."""
        items = self.manifest.values()
        item = next((i for i in items if "cover-image" in i[2]), None)
        item = item or self.manifest.get(self._cover_id)
        if item is None or item[1] not in ("image/jpeg", "image/png"):
            return None
        try:
            info = self._zip.getinfo(self._path(item[0]))
        except KeyError:
            return None
        if info.file_size > MAX_COVER_BYTES:
            return None
        data = self._zip.read(info)
        self._budget.spend_bytes(len(data))
        return data

    def resource(self, name: str) -> zipfile.ZipInfo | None:
        """The archive entry of a manifest item's name (relative to the package file);
        None when the archive has no such file."""
        try:
            return self._zip.getinfo(self._path(name))
        except KeyError:
            return None

    def open_resource(self, entry: zipfile.ZipInfo) -> IO[bytes]:
        """An entry's bytes as a stream (``zipfile`` stops it at its declared size)."""
        return self._zip.open(entry)

    def _nav_page(self) -> tuple[str, Any] | None:
        """The EPUB 3 navigation page (its name and parsed tree), read once."""
        if self._nav is None:
            item = next((item for item in self.manifest.values() if "nav" in item[2]), None)
            if item is None:
                return None
            self._nav = (item[0], html.document_fromstring(self._whole(self._path(item[0]))))
        found: tuple[str, Any] = self._nav
        return found

    def _path(self, name: str) -> str:
        """The archive path of a name relative to the package file."""
        return posixpath.normpath(posixpath.join(self._opf_dir, name))

    def _info(self, path: str) -> zipfile.ZipInfo:
        try:
            return self._zip.getinfo(path)
        except KeyError:
            raise UnreadableDocument(f"{NOT_AN_EPUB}: it has no file {path[:100]}") from None

    def _whole(self, path: str) -> bytes:
        """A package file (container, package, table of contents), whole: at most
        MAX_PACKAGE_FILE_BYTES."""
        info = self._info(path)
        if info.file_size > MAX_PACKAGE_FILE_BYTES:
            raise too_large(f"its file {path[:100]} is over 4 MiB", "4 MiB")
        data = self._zip.read(info)
        self._budget.spend_bytes(len(data))
        return data

    def _xml(self, path: str) -> Any:
        return etree.fromstring(self._whole(path), _XML)


def _manifest(opf: Any) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """id -> (href, media type, properties) of every manifest item."""
    manifest = opf.find(f"{_OPF}manifest")
    if manifest is None:
        raise UnreadableDocument(f"{NOT_AN_EPUB}: its package file has no manifest")
    return {
        item.get("id", ""): (
            unquote(item.get("href", "")),
            item.get("media-type", ""),
            tuple(item.get("properties", "").split()),
        )
        for item in manifest.iter(f"{_OPF}item")
    }


def _clean(text: str) -> str:
    """Metadata text on one line, without control characters."""
    return " ".join("".join(c for c in text if c.isprintable() or c.isspace()).split())


def _metadata_text(opf: Any, name: str) -> str | None:
    """The first non-blank ``dc:NAME`` of the package's metadata, cleaned and bounded."""
    for element in opf.iterfind(f"{_OPF}metadata/{_DC}{name}"):
        text = _clean(element.text or "")[:_METADATA_CHARACTERS]
        if text:
            return text
    return None


def _relative(base: str, href: str) -> str:
    """``href`` (relative to the file ``base``) relative to the package file."""
    name, _, anchor = unquote(href).partition("#")
    path = posixpath.normpath(posixpath.join(posixpath.dirname(base), name)) if name else base
    return f"{path}#{anchor}" if anchor else path


def _nav_entries(root: Any) -> Iterator[tuple[str, str]]:
    """(title, href) of the EPUB 3 navigation page's table of contents, depth first."""
    for nav in _navs(root, "toc")[:1]:
        for link in nav.iter("a"):
            if link.get("href"):
                yield " ".join(link.text_content().split()), link.get("href")


def _navs(root: Any, kind: str) -> list[Any]:
    """The navigation page's ``nav`` elements of ``epub:type`` ``kind``."""
    return [nav for nav in root.iter("nav") if kind in " ".join(nav.attrib.values()).split()]


def _ncx_entries(ncx: Any) -> Iterator[tuple[str, str]]:
    """(title, src) of the NCX's navigation points, depth first."""
    for point in ncx.iter(f"{_NCX}navPoint"):
        content = point.find(f"{_NCX}content")
        label = point.find(f"{_NCX}navLabel/{_NCX}text")
        if content is not None and content.get("src"):
            title = " ".join((label.text or "").split()) if label is not None else ""
            yield title, content.get("src")
