"""Reading real documents: Markdown (every construct kept or removed), TXT and EPUB."""

from __future__ import annotations

from pathlib import Path

import pytest

from speechbatch.adapters.documents import UnreadableDocument, read_document
from speechbatch.domain.documents import split_document, spoken_text, squeeze
from tests.support.epubs import SPOKEN, build_epub

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
