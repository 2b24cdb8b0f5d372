"""A read-along made of an imported EPUB's own pages, on both databases: the import keeps
the EPUB, and an ``"format": "epub"`` render of the job copies its pages, image and style
sheet, wraps each item's sentences in spans of those pages and syncs them to the MP3 as
the plain book would (the same text, the same clips); epubcheck finds nothing. A job
imported from Markdown, or whose EPUB is gone, gets the plain book; an item of several
paragraphs shows them as paragraphs."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import update

from speechbatch.adapters.models import Item, ItemStatus, Job, JobStatus
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.domain.book_source import source_key
from speechbatch.domain.documents import squeeze
from speechbatch.services.spending import collect_garbage
from tests.helpers import concrete, resync_counters
from tests.integration.test_import_api import _import
from tests.integration.test_read_along import OPF, SMIL, XHTML, clock, epubcheck
from tests.integration.test_render_presets import render
from tests.integration.test_renders import builders_end, fetch
from tests.support.epubs import STYLED_CSS, build_styled_epub, png_bytes
from tests.support.render_audio import Tone, encode_mp3, finished_job, tone_samples

__all__ = ["builders_end"]


def _done(svc: Services, job: dict[str, Any]) -> None:
    """Every item of an imported job DONE with a tone as its audio (a second a sentence)."""
    with concrete(svc.uow_factory)() as uow:
        for item in job["items"]:
            seconds = 0.6 + 0.4 * item["text"].count(".")
            key = f"jobs/{job['id']}/tone-{item['position']}.mp3"
            svc.storage.write(key, encode_mp3(tone_samples(Tone(item["text"], seconds))))
            uow.session.execute(
                update(Item)
                .where(Item.id == item["id"])
                .values(status=ItemStatus.DONE, audio_path=key)
            )
        uow.session.execute(
            update(Job).where(Job.id == job["id"]).values(status=JobStatus.COMPLETED, attempt=1)
        )
        uow.commit()
    resync_counters(svc, job["id"])


def _book(client: FlaskClient, auth: dict[str, str], job_id: int, tmp_path: Path) -> bytes:
    done = render(client, auth, job_id, format="epub")
    data: bytes = fetch(client, done["download_url"], auth)[2]
    path = tmp_path / f"book-{done['id']}.epub"
    path.write_bytes(data)
    epubcheck(path)
    return data


def _synced(epub: zipfile.ZipFile) -> list[tuple[str, float, float]]:
    """(the synced element's text, clip begin, clip end) of every par, in spine order."""
    package_path = ET.fromstring(epub.read("META-INF/container.xml"))[0][0].get("full-path", "")
    base = package_path.rpartition("/")[0]
    package = ET.fromstring(epub.read(package_path))
    items = {i.get("id"): i for i in package.iter(f"{OPF}item")}
    found = []
    for ref in package.iter(f"{OPF}itemref"):
        page = items[ref.get("idref")]
        if page.get("media-overlay") is None:
            continue
        smil_href = items[page.get("media-overlay")].get("href", "")
        tree = ET.fromstring(epub.read(f"{base}/{page.get('href')}"))
        texts = {e.get("id"): squeeze("".join(e.itertext())) for e in tree.iter() if e.get("id")}
        for par in ET.fromstring(epub.read(f"{base}/{smil_href}")).iter(f"{SMIL}par"):
            text, audio = par.find(f"{SMIL}text"), par.find(f"{SMIL}audio")
            assert text is not None and audio is not None
            anchor = text.get("src", "").rpartition("#")[2]
            begin, end = clock(audio.get("clipBegin", "")), clock(audio.get("clipEnd", ""))
            found.append((texts[anchor], begin, end))
    return found


def test_a_read_along_of_an_imported_epub_is_made_of_its_own_pages(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord, tmp_path: Path
) -> None:
    imported = _import(client, auth, "styled.epub", build_styled_epub())
    assert imported.status_code == 201, imported.get_json()
    job = imported.get_json()
    _done(svc, job)
    data = _book(client, auth, job["id"], tmp_path)
    with zipfile.ZipFile(io.BytesIO(data)) as epub:
        names = epub.namelist()
        assert names[0] == "mimetype"
        assert epub.read("EPUB/style/book.css").decode() == STYLED_CSS
        assert epub.read("EPUB/images/clock.png") == png_bytes()
        page = ET.fromstring(epub.read("EPUB/one.xhtml"))
        images = list(page.iter(f"{XHTML}img"))
        assert [(i.get("src"), i.get("class")) for i in images] == [("images/clock.png", "pic")]
        assert [p.get("class") for p in page.iter(f"{XHTML}p")] == ["lead", None, None]
        assert [h.get("class") for h in page.iter(f"{XHTML}h1")] == ["title"]
        links = [link.get("href") for link in page.iter(f"{XHTML}link")]
        assert links == ["style/book.css", "speechbatch/read-along.css"]
        spans = [s for s in page.iter(f"{XHTML}span") if s.get("id", "").startswith("speechbatch")]
        # Each sentence its own span, the first around the book's own emphasis.
        assert [squeeze("".join(s.itertext())) for s in spans] == [
            "Chapter One",
            "It was a bright cold day in April.",
            "The clocks were striking thirteen.",
            "Winston Smith slipped quickly through the glass doors.",
        ]
        assert spans[1].find(f"{XHTML}em") is not None
        own = _synced(epub)
        package = epub.read("EPUB/content.opf").decode()
        assert "speechbatch-styled" not in package and 'media-overlay="smil-' in package
    # The same job's plain book (its EPUB gone) has the same text and the same clips.
    svc.storage.delete(source_key(admin.organization_id, job["id"]))
    with zipfile.ZipFile(io.BytesIO(_book(client, auth, job["id"], tmp_path))) as epub:
        assert "EPUB/chapter-001.xhtml" in epub.namelist()
        plain = _synced(epub)
    assert [text for text, _, _ in own] == [text for text, _, _ in plain]
    for (_, begin, end), (_, plain_begin, plain_end) in zip(own, plain, strict=True):
        assert abs(begin - plain_begin) < 0.0005 and abs(end - plain_end) < 0.0005


def test_a_markdown_job_gets_the_plain_book_with_its_paragraphs(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord, tmp_path: Path
) -> None:
    imported = _import(client, auth, "notes.md", b"# Notes\n\nOne line here.\n")
    assert imported.status_code == 201, imported.get_json()
    job = imported.get_json()
    _done(svc, job)
    with zipfile.ZipFile(io.BytesIO(_book(client, auth, job["id"], tmp_path))) as epub:
        assert not [n for n in epub.namelist() if "speechbatch/" in n]
        assert "EPUB/chapter-001.xhtml" in epub.namelist()
    tones = [Tone("First paragraph here.\n\nSecond paragraph here. And more.", 2.0)]
    job_id = finished_job(svc, admin, tones)
    with zipfile.ZipFile(io.BytesIO(_book(client, auth, job_id, tmp_path))) as epub:
        page = ET.fromstring(epub.read("EPUB/chapter-001.xhtml"))
    division = next(page.iter(f"{XHTML}div"))
    assert division.get("id") == "item-1"
    paragraphs = [squeeze(" ".join(p.itertext())) for p in division.iter(f"{XHTML}p")]
    assert paragraphs == ["First paragraph here.", "Second paragraph here. And more."]


def test_the_kept_epub_lives_as_long_as_its_job(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job = _import(client, auth, "styled.epub", build_styled_epub()).get_json()
    key = source_key(admin.organization_id, job["id"])
    with svc.storage.open(key) as kept:
        assert kept.read(4) == b"PK\x03\x04"
    collected = collect_garbage(svc.uow_factory, svc.storage, min_age_seconds=0)
    assert key not in collected.deleted
    assert client.delete(f"/api/jobs/{job['id']}", headers=auth).status_code == 204
    with pytest.raises(FileNotFoundError):
        svc.storage.open(key).close()
