"""Reading real documents: Markdown (every construct kept or removed), TXT and EPUB."""

from __future__ import annotations

from pathlib import Path

import pytest

from speechbatch.adapters.documents import UnreadableDocument, read_book, read_document
from speechbatch.domain.documents import split_document, spoken_text, squeeze
from tests.support.epubs import (
    BOOK_AUTHOR,
    BOOK_CHAPTERS,
    BOOK_TITLE,
    METADATA,
    SPOKEN,
    build_book_epub,
    build_epub,
    cover_png,
    deflated,
    hand_made_epub,
    package,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "documents"


def test_markdown_keeps_the_spoken_text_and_removes_markup() -> None:
    sections = read_document("novel.md", (FIXTURES / "novel.md").read_bytes(), "Novel")
    expected = (FIXTURES / "novel.expected.txt").read_text()
    assert spoken_text(sections) == squeeze(expected)
    assert [s.title for s in sections] == [
        "Novel", "Chapter One: The Harbour", "Chapter Two: At Sea",
    ]  # fmt: skip
    spoken = spoken_text(sections)
    for left_out in ("print", "indented code", "lighthouse", "raw HTML", "<span>", "https"):
        assert left_out not in spoken


@pytest.mark.parametrize("max_chars", [200, 1500])
def test_markdown_items_join_to_the_spoken_text(max_chars: int) -> None:
    sections = read_document("novel.md", (FIXTURES / "novel.md").read_bytes(), "Novel")
    split = split_document(sections, max_chars)
    assert squeeze(" ".join(i.text for i in split.items)) == spoken_text(sections)
    headings = [split.items[c.first_position - 1].text for c in split.chapters]
    assert headings[1:] == ["Chapter One: The Harbour", "Chapter Two: At Sea"]


def test_plain_text_is_one_chapter_of_paragraphs() -> None:
    sections = read_document("plain.txt", (FIXTURES / "plain.txt").read_bytes(), "Plain")
    assert [s.title for s in sections] == ["Plain"]
    assert [squeeze(p) for p in sections[0].paragraphs] == [
        "The first paragraph of a plain text file. It continues here.",
        "A second paragraph. It has two sentences.",
    ]


def test_epub_chapters_follow_its_table_of_contents() -> None:
    sections = read_document("book.epub", build_epub(), "Book")
    assert [s.title for s in sections] == ["The First Chapter", "Part B", "The Second Chapter"]
    assert spoken_text(sections) == SPOKEN
    split = split_document(sections, 200)
    firsts = [split.items[c.first_position - 1].text for c in split.chapters]
    assert firsts == ["Chapter One", "Part B", "Chapter Two"]


def test_epub_without_a_table_of_contents_has_a_chapter_per_spine_file() -> None:
    sections = read_document("book.epub", build_epub(with_toc=False), "Book")
    assert [s.title for s in sections] == ["Chapter One", "Chapter Two"]
    assert spoken_text(sections) == SPOKEN


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("book.pdf", b"%PDF-1.4", "unsupported file type"),
        ("book.epub", b"not a zip at all", "not a readable EPUB"),
        ("notes.md", b"\xff\xfe\x00broken", "not UTF-8"),
    ],
)
def test_unreadable_files_are_refused(name: str, data: bytes, message: str) -> None:
    with pytest.raises(UnreadableDocument, match=message):
        read_document(name, data, "T")


def test_an_epubs_front_and_back_matter_and_metadata_are_read() -> None:
    book = read_book("book.epub", build_book_epub(), "")
    assert (book.title, book.author, book.cover) == (BOOK_TITLE, BOOK_AUTHOR, cover_png())
    # The cover by the guide and landmarks, the title page, imprint and copyright page by
    # their epub:type, the colophon by its title.
    assert [(s.title or BOOK_TITLE, not s.matter) for s in book.sections] == BOOK_CHAPTERS


def test_the_guide_alone_marks_front_matter() -> None:
    guide = b'<guide><reference type="copyright-page" href="c2.xhtml"/></guide>'
    manifest = (
        b'<item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>'
        b'<item id="c2" href="c2.xhtml" media-type="application/xhtml+xml"/>'
    )
    opf = package(manifest, b'<itemref idref="c1"/><itemref idref="c2"/>')
    opf = opf.replace(b"</package>", guide + b"</package>")
    page = b"<html><body><p>All rights reserved.</p></body></html>"
    book = read_book("b.epub", hand_made_epub(deflated("OEBPS/c2.xhtml", page), opf=opf), "")
    assert [s.matter for s in book.sections] == [False, True]
    assert (book.title, book.author, book.cover) == ("Hand made", None, None)


def test_metadata_is_one_line_within_bounds() -> None:
    metadata = METADATA.replace(
        b"<dc:language>",
        b"<dc:creator>  Ann\n  Author\t </dc:creator><dc:creator>Bo</dc:creator>"
        + b"<dc:language>",
    ).replace(b"Hand made", b"T" * 5000)
    book = read_book("b.epub", hand_made_epub(opf=package(metadata=metadata)), "")
    assert book.author == "Ann Author, Bo"
    assert book.title == "T" * 1000
