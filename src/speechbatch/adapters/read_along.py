"""A read-along EPUB 3 written to a file: the documents of ``domain/read_along.py``, the
render's MP3 and the cover, zipped as the OCF container asks (``mimetype`` first and
stored; the rest deflated except the audio, which does not compress).

A job imported from an EPUB gets a book made of that EPUB's own pages, images and styles
(``adapters/read_along_source``); when that cannot be made (the source unreadable, or
none of the items' text found in it) the job gets this plain book instead: a book is
never the reason a render fails."""

from __future__ import annotations

import logging
import uuid
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from speechbatch.adapters.read_along_source import NothingFound, write_source_read_along
from speechbatch.domain import read_along as book
from speechbatch.domain.renders import ChapterMark, Tags

log = logging.getLogger(__name__)

COVER_NAMES = {"image/jpeg": "cover.jpg", "image/png": "cover.png"}


def book_chapters(
    chapters: list[ChapterMark], passages: list[tuple[int, book.Passage]]
) -> list[book.BookChapter]:
    """The render's chapters with their passages ((chapter index, passage) in order); a
    chapter without passages is left out (it has nothing to read)."""
    grouped: list[list[book.Passage]] = [[] for _ in chapters]
    for chapter, passage in passages:
        grouped[chapter].append(passage)
    return [
        book.BookChapter(mark.title, found)
        for mark, found in zip(chapters, grouped, strict=True)
        if found
    ]


class _Renewal:
    """The render's lease renewal, remembering what it raised: a lost lease stops the
    render, while anything else going wrong with the source only makes a plain book."""

    def __init__(self, renew: Callable[[], None]) -> None:
        self._renew = renew
        self.failure: BaseException | None = None

    def __call__(self) -> None:
        try:
            self._renew()
        except BaseException as exc:
            self.failure = exc
            raise


def write_read_along(
    path: Path,
    audio: Path,
    tags: Tags,
    render_id: int,
    chapters: list[book.BookChapter],
    source: bytes | None = None,
    renew: Callable[[], None] = lambda: None,
) -> None:
    """Write the EPUB of ``chapters`` read by ``audio`` (an MP3) at ``path``: made of
    ``source`` (the EPUB the job was imported from) when there is one and its text is
    found, else a plain book of the items' text."""
    cover_name = COVER_NAMES.get(tags.cover_type or "") if tags.cover else None
    info = book.BookInfo(
        identifier=f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'speechbatch:render:{render_id}')}",
        title=tags.album,
        author=tags.author,
        narrator=tags.narrator,
        language=tags.language,
        modified=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        cover_name=cover_name,
        cover_type=tags.cover_type if cover_name else None,
    )
    if source is not None:
        renewal = _Renewal(renew)
        try:
            write_source_read_along(path, audio, info, tags.cover, chapters, source, renewal)
            return
        except NothingFound:
            log.info("read-along render=%s: no item's text is in its EPUB; a plain book", render_id)
        except Exception as exc:
            if exc is renewal.failure:
                raise  # the render's lease is lost: it stops, whatever book it was making
            log.warning(  # an unreadable source still makes a book, a plain one
                "read-along render=%s: its EPUB could not be used; a plain book",
                render_id,
                exc_info=True,
            )
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as epub:
        epub.writestr(zipfile.ZipInfo("mimetype"), b"application/epub+zip", zipfile.ZIP_STORED)
        epub.writestr("META-INF/container.xml", book.container_xml())
        epub.writestr("EPUB/package.opf", book.package_opf(info, chapters))
        epub.writestr("EPUB/nav.xhtml", book.nav_xhtml(info.title, chapters, tags.language))
        epub.writestr("EPUB/style.css", book.STYLE)
        for index, chapter in enumerate(chapters):
            epub.writestr(
                f"EPUB/{book.chapter_name(index, 'xhtml')}",
                book.chapter_xhtml(chapter, tags.language),
            )
            epub.writestr(
                f"EPUB/{book.chapter_name(index, 'smil')}", book.chapter_smil(index, chapter)
            )
        if cover_name and tags.cover:
            epub.writestr(f"EPUB/{cover_name}", tags.cover, zipfile.ZIP_STORED)
        epub.write(audio, f"EPUB/{book.AUDIO}", zipfile.ZIP_STORED)
