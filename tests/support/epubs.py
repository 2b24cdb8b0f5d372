"""Small real EPUB files, built with ebooklib as a publisher's tool would."""

from __future__ import annotations

import functools
import html
import io
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from ebooklib import epub
from PIL import Image

CHAPTER_ONE = (
    "<h1>Chapter One</h1><p>It was a <em>bright</em> cold day in April.</p>"
    "<p>The clocks were striking thirteen.<img src='clock.png' alt='a clock'/></p>"
    "<h2 id='part-b'>Part B</h2><ul><li>Bread</li><li>Milk</li></ul>"
)
CHAPTER_TWO = (
    "<h1>Chapter Two</h1><p>The end came <a href='#x'>quietly</a>.</p><script>x=1</script>"
)
# What a listener hears, in order: the pages' text without images and scripts.
SPOKEN = (
    "Chapter One It was a bright cold day in April. The clocks were striking thirteen. "
    "Part B Bread Milk Chapter Two The end came quietly."
)


def build_epub(*, with_toc: bool = True) -> bytes:
    """An EPUB 3 of two chapters; with a table of contents of three entries (one an
    anchor inside the first chapter), or with none (only the spine)."""
    book = epub.EpubBook()
    book.set_identifier("speechbatch-test")
    book.set_title("A Test Book")
    book.set_language("en")
    one = epub.EpubHtml(title="One", file_name="one.xhtml", lang="en")
    one.content = CHAPTER_ONE
    two = epub.EpubHtml(title="Two", file_name="two.xhtml", lang="en")
    two.content = CHAPTER_TWO
    book.add_item(one)
    book.add_item(two)
    if with_toc:
        book.toc = [
            epub.Link("one.xhtml", "The First Chapter", "one"),
            epub.Link("one.xhtml#part-b", "Part B", "part-b"),
            epub.Link("two.xhtml", "The Second Chapter", "two"),
        ]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", one, two] if with_toc else [one, two]
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()


# --- EPUBs built by hand, entry by entry: broken, hostile or unusual ----------------------

CONTAINER = (
    b'<?xml version="1.0"?><container version="1.0" '
    b'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
    b'<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
    b"</rootfiles></container>"
)
METADATA = (
    b'<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">x'
    b"</dc:identifier><dc:title>Hand made</dc:title><dc:language>en</dc:language></metadata>"
)
PAGE = b"<html xmlns='http://www.w3.org/1999/xhtml'><body><p>Hello there.</p></body></html>"


@dataclass(frozen=True)
class Entry:
    """One ZIP entry as stored: its packed bytes, and what its directory declares."""

    name: str
    packed: bytes
    crc: int
    size: int
    method: int = zipfile.ZIP_DEFLATED


def stored(name: str, data: bytes) -> Entry:
    """An entry stored as it is."""
    return Entry(name, data, zlib.crc32(data), len(data), zipfile.ZIP_STORED)


def deflated(name: str, data: bytes) -> Entry:
    """An entry packed with deflate."""
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    return Entry(name, packer.compress(data) + packer.flush(), zlib.crc32(data), len(data))


def zeros(name: str, size: int) -> Entry:
    """An entry that unpacks to ``size`` zero bytes (a multiple of 1 MiB) from about a
    thousandth of that."""
    packed, crc = _packed_zeros(size)
    return Entry(name, packed, crc, size)


@functools.cache
def _packed_zeros(size: int, chunk: int = 1 << 20) -> tuple[bytes, int]:
    """The packed stream of one chunk of zeros repeated (each ends with a full flush), so
    a 1 GiB bomb takes a fraction of a second and no memory beyond its packed megabyte."""
    block_packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = block_packer.compress(bytes(chunk)) + block_packer.flush(zlib.Z_FULL_FLUSH)
    end = zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    crc, zero_chunk = 0, bytes(chunk)
    for _ in range(size // chunk):
        crc = zlib.crc32(zero_chunk, crc)
    return block * (size // chunk) + end, crc


def raw_zip(entries: list[Entry]) -> bytes:
    """A ZIP archive of these entries, written byte by byte (``zipfile`` would pack them
    itself and check what they declare)."""
    out, directory = io.BytesIO(), []
    for e in entries:
        name, offset = e.name.encode(), out.tell()
        fields = (e.method, 0, 0x21, e.crc, len(e.packed), e.size, len(name))
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, *fields, 0) + name + e.packed)
        directory.append(
            struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, *fields, 0, 0, 0, 0, 0, offset)
            + name
        )
    body = b"".join(directory)
    start = out.tell()
    out.write(body)
    count = len(entries)
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(body), start, 0))
    return out.getvalue()


def package(
    manifest: bytes = b'<item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>',
    spine: bytes = b'<itemref idref="c1"/>',
    metadata: bytes = METADATA,
) -> bytes:
    """A package file (``content.opf``) with these parts (``b""`` leaves one out)."""
    return (
        b'<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
        b'unique-identifier="id">' + metadata
        + (b"<manifest>" + manifest + b"</manifest>" if manifest else b"")
        + (b"<spine>" + spine + b"</spine>" if spine else b"")
        + b"</package>"
    )  # fmt: skip


def hand_made_epub(*extra: Entry, opf: bytes | None = None, page: bytes = PAGE) -> bytes:
    """An EPUB of one page, with ``extra`` entries and another package file if given."""
    return raw_zip(
        [
            stored("mimetype", b"application/epub+zip"),
            deflated("META-INF/container.xml", CONTAINER),
            deflated("OEBPS/content.opf", package() if opf is None else opf),
            deflated("OEBPS/c1.xhtml", page),
            *extra,
        ]
    )


# --- A book as a publisher makes it: front and back matter around the chapters ----------

PROSE = Path(__file__).resolve().parents[1] / "fixtures" / "prose"
BOOK_TITLE = "Strange Case of Dr Jekyll and Mr Hyde"
BOOK_AUTHOR = "Robert Louis Stevenson"
SEARCH = (
    "<h2>Search for Mr. Hyde</h2><p>That evening Mr. Utterson came home to his bachelor "
    "house in sombre spirits and sat down to dinner without relish.</p>"
)
# (file, table of contents title or None, body): the cover is named only by the guide and
# the landmarks, the title page, imprint and copyright page by their epub:type, and the
# colophon only by its title.
BOOK_PAGES = (
    ("cover.xhtml", None, f"<p>{BOOK_TITLE}</p>"),
    ("titlepage.xhtml", "Opening",
     f"<section epub:type='titlepage'><h1>{BOOK_TITLE}</h1><p>By {BOOK_AUTHOR}.</p></section>"),
    ("imprint.xhtml", "About this edition",
     "<section epub:type='imprint'><p>This ebook is the product of many hours of work by "
     "volunteers.</p></section>"),
    ("door.xhtml", "Story of the Door", None),
    ("search.xhtml", "Search for Mr. Hyde", SEARCH),
    ("colophon.xhtml", "Colophon", "<p>This book was set in a typeface of its own.</p>"),
    ("uncopyright.xhtml", "Uncopyright",
     "<section epub:type='copyright-page'><p>May you do good and not evil.</p></section>"),
)  # fmt: skip
# The chapters as an import lists them, and which the default keeps.
BOOK_CHAPTERS = [
    (BOOK_TITLE, False), ("Opening", False), ("About this edition", False),
    ("Story of the Door", True), ("Search for Mr. Hyde", True),
    ("Colophon", False), ("Uncopyright", False),
]  # fmt: skip


def door_html() -> str:
    """Stevenson's first chapter (a fixture of the splitter's tests) as XHTML."""
    paragraphs = (PROSE / "stevenson-story-of-the-door.txt").read_text().strip().split("\n\n")
    return f"<h2>{paragraphs[0]}</h2>" + "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs[1:])


@functools.cache
def cover_png() -> bytes:
    """A small PNG, as a book's cover image."""
    out = io.BytesIO()
    Image.new("RGB", (60, 90), (120, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def build_book_epub(cover: bytes | None = None) -> bytes:
    """An EPUB 3 with a title and an author, a cover image (``cover``, else a small PNG),
    a cover page, title page, imprint, two chapters, a colophon and a copyright page."""
    book = epub.EpubBook()
    book.set_identifier("speechbatch-book")
    book.set_title(BOOK_TITLE)
    book.set_language("en")
    book.add_author(BOOK_AUTHOR)
    book.set_cover("cover.png", cover_png() if cover is None else cover, create_page=False)
    pages, toc = [], []
    for name, title, body in BOOK_PAGES:
        page = epub.EpubHtml(title=title or "Cover", file_name=name, lang="en")
        page.content = body if body is not None else door_html()
        book.add_item(page)
        pages.append(page)
        if title is not None:
            toc.append(epub.Link(name, title, name.split(".")[0]))
    book.toc = toc
    book.guide.append({"type": "cover", "href": "cover.xhtml", "title": "Cover"})
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *pages]
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()


# --- A styled book with an image: what a read-along keeps of the publisher's work ---------

STYLED_CSS = ".lead { font-variant: small-caps; }\n.pic { width: 50%; }\n"
STYLED_ONE = (
    "<h1 class='title'>Chapter One</h1>"
    "<p class='lead'>It was a <em>bright</em> cold day in April. The clocks were "
    "striking thirteen.</p>"
    "<p><img class='pic' src='images/clock.png' alt='a clock'/></p>"
    "<p>Winston Smith slipped quickly through the glass doors.</p>"
)
STYLED_TWO = "<h1 class='title'>Chapter Two</h1><p class='lead'>The end came <b>quietly</b>.</p>"


def png_bytes() -> bytes:
    """A small PNG image."""
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def build_styled_epub() -> bytes:
    """An EPUB 3 of two chapters whose pages link a style sheet and show an image."""
    book = epub.EpubBook()
    book.set_identifier("speechbatch-styled")
    book.set_title("A Styled Book")
    book.set_language("en")
    style = epub.EpubItem(
        uid="style", file_name="style/book.css", media_type="text/css", content=STYLED_CSS
    )
    book.add_item(style)
    picture = epub.EpubImage(
        uid="clock", file_name="images/clock.png", media_type="image/png", content=png_bytes()
    )
    book.add_item(picture)
    pages = []
    for name, title, body in (("one.xhtml", "One", STYLED_ONE), ("two.xhtml", "Two", STYLED_TWO)):
        page = epub.EpubHtml(title=title, file_name=name, lang="en")
        page.content = body
        page.add_item(style)
        book.add_item(page)
        pages.append(page)
    book.toc = [epub.Link(p.file_name, p.title, p.file_name) for p in pages]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *pages]
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()
