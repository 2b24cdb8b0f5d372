"""A read-along book synced word by word, heard: an espeak job (its takes timed by word
from their audio) rendered as an EPUB with a paragraph break in one item. Every word is a
span with its own clip, each clip starts where the take's timing puts its word in the
book's MP3 (moved by the paragraph pause where it comes after one), the pause between the
paragraphs is the asked gap, and epubcheck finds nothing; on both databases. The same
for a job imported from an EPUB: each word a span of the book's own pages."""

from __future__ import annotations

import io
import itertools
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from speechbatch.adapters.providers.espeak import EspeakProvider
from speechbatch.config import Settings
from speechbatch.runner.render_builder import wait_for_renders
from speechbatch.services import create_token
from tests.conftest import app_for_tests, services
from tests.helpers import new_admin
from tests.integration.test_import_api import BOUNDARY, multipart
from tests.integration.test_paragraph_gap import silences_in
from tests.integration.test_read_along import SMIL, XHTML, clock, epubcheck
from tests.integration.test_render_presets import render
from tests.integration.test_renders import fetch
from tests.integration.test_spending import finished
from tests.integration.test_take_timing import done_job
from tests.support.epubs import build_styled_epub
from tests.support.render_audio import decode_all

TEXTS = [
    "The quick brown fox jumps over the lazy dog. It was not amused.\n\n"
    "The dog slept on, and the fox went home.",
    "Please mind the gap. The next stop is Central Station.",
]
GAP = 1.2


@pytest.fixture
def espeak_app(settings: Settings) -> Iterator[Flask]:
    yield from app_for_tests(settings, EspeakProvider())
    assert wait_for_renders(30), "a render builder was still running"


def _pars(epub: zipfile.ZipFile) -> list[tuple[str, float, float, str]]:
    """(span id, clip begin, clip end, the span's text) of every par of the book."""
    page = ET.fromstring(epub.read("EPUB/chapter-001.xhtml"))
    spans = {e.get("id"): e.text for e in page.iter(f"{XHTML}span")}
    found = []
    for par in ET.fromstring(epub.read("EPUB/chapter-001.smil")).iter(f"{SMIL}par"):
        text, audio = par.find(f"{SMIL}text"), par.find(f"{SMIL}audio")
        assert text is not None and audio is not None
        anchor = text.get("src", "").split("#")[1]
        begin, end = clock(audio.get("clipBegin", "")), clock(audio.get("clipEnd", ""))
        found.append((anchor, begin, end, spans[anchor] or ""))
    return found


def test_a_read_along_book_syncs_each_word_to_its_speech(espeak_app: Flask, tmp_path: Path) -> None:
    client, auth, job = done_job(espeak_app, "en-us", TEXTS)
    done = render(client, auth, job["id"], format="epub", paragraph_gap_ms=int(GAP * 1000))
    data = fetch(client, done["download_url"], auth)[2]
    path = tmp_path / "book.epub"
    path.write_bytes(data)
    report = epubcheck(path)
    print(report.strip().splitlines()[-1])
    with zipfile.ZipFile(io.BytesIO(data)) as epub:
        pars = _pars(epub)
        samples, rate = decode_all(epub.read("EPUB/audio/book.mp3"))

    # One clip a word, in order, tiling each item's audio.
    words = [w for text in TEXTS for w in text.split()]
    assert [text for _, _, _, text in pars] == words
    assert all(begin < end for _, begin, end, _ in pars)
    assert all(a[2] <= b[1] + 0.0005 for a, b in itertools.pairwise(pars))

    silences = silences_in(samples, rate)
    longest = max(silences)
    print(f"silences in the book's audio (paragraph_gap_ms={int(GAP * 1000)}): {silences}")
    assert abs(longest - GAP) < 0.12, silences

    timings: list[Any] = [
        client.get(f"/api/jobs/{job['id']}/items/{item['id']}/timing", headers=auth).get_json()
        for item in job["items"]
    ]
    first = [p for p in pars if p[0].startswith("item-1-")]
    second = [p for p in pars if p[0].startswith("item-2-")]
    # The second item has no paragraph break: each word's clip begins where its take's
    # timing puts it, from the item's start.
    for (_, begin, _, _), word in list(zip(second, timings[1]["words"], strict=True))[1:]:
        assert abs(begin - (second[0][1] + word["start_seconds"])) < 0.002
    # In the first, the words after the break moved by the pause: the second paragraph's
    # first word begins where its sound does, after the long silence.
    break_at = len(TEXTS[0].split("\n\n")[0].split())
    before, after = first[break_at - 1], first[break_at]
    assert after[3] == "The" and before[3] == "amused."
    for (_, begin, _, _), word in list(zip(first, timings[0]["words"], strict=False))[1:break_at]:
        assert abs(begin - (first[0][1] + word["start_seconds"])) < 0.002
    moved = after[1] - (first[0][1] + timings[0]["words"][break_at]["start_seconds"])
    print(f"the second paragraph's words moved by {moved:.3f} s")
    assert moved > 0
    window = rate // 200
    onset_after_silence = _onset_after(samples, rate, after[1] - GAP / 2, window)
    assert abs(onset_after_silence - after[1]) < 0.05, (onset_after_silence, after[1])


def _onset_after(samples: Any, rate: int, seconds: float, window: int) -> float:
    """The first 5 ms window louder than -40 dBFS at or after ``seconds``."""
    at = int(seconds * rate)
    while at + window <= len(samples):
        chunk = samples[at : at + window]
        if float((chunk**2).mean()) ** 0.5 > 0.01:
            return at / rate
        at += window
    return len(samples) / rate


def test_a_read_along_of_an_imported_epub_syncs_each_word_in_its_own_pages(
    espeak_app: Flask, tmp_path: Path
) -> None:
    svc = services(espeak_app)
    admin = new_admin(svc, "acme", "admin@acme.test")
    auth = {"Authorization": f"Bearer {create_token(svc.uow_factory, admin.email)}"}
    client = espeak_app.test_client()
    body = multipart({"voice": "en-us"}, "styled.epub", build_styled_epub())
    headers = {**auth, "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    imported = client.post("/api/jobs/import", data=body, headers=headers)
    assert imported.status_code == 201, imported.get_json()
    job_id = imported.get_json()["id"]
    assert client.post(f"/api/jobs/{job_id}/generate", headers=auth).status_code == 202
    assert finished(svc, admin, job_id)["status"] == "COMPLETED"
    done = render(client, auth, job_id, format="epub")
    path = tmp_path / "book.epub"
    path.write_bytes(fetch(client, done["download_url"], auth)[2])
    epubcheck(path)
    with zipfile.ZipFile(path) as epub:
        page = ET.fromstring(epub.read("EPUB/one.xhtml"))
        smil = ET.fromstring(epub.read("EPUB/speechbatch/page-1.smil"))
    spans = {
        e.get("id"): "".join(e.itertext())
        for e in page.iter(f"{XHTML}span")
        if e.get("id", "").startswith("speechbatch-")
    }
    # Every word of the page is a span of its own, in the book's own paragraphs, and
    # each is synced, in order, clips never going back.
    words = "Chapter One It was a bright cold day in April. The clocks were striking thirteen."
    words += " Winston Smith slipped quickly through the glass doors."
    assert list(spans.values()) == words.split()
    emphasis = next(page.iter(f"{XHTML}em"))  # the book's own, around its word's span
    assert [e.text for e in emphasis.iter(f"{XHTML}span")] == ["bright"]
    pars = []
    for par in smil.iter(f"{SMIL}par"):
        text, audio = par.find(f"{SMIL}text"), par.find(f"{SMIL}audio")
        assert text is not None and audio is not None
        pars.append((text.get("src", "").rpartition("#")[2], clock(audio.get("clipBegin", ""))))
    assert [anchor for anchor, _ in pars] == list(spans)
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(pars))
