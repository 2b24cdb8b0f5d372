"""A read-along book (``"format": "epub"``), on both databases: an EPUB 3 whose chapters
carry Media Overlays, checked by Debian's ``epubcheck`` (no errors, no warnings) and read
back: each item's paragraph (by id) is synced to its clip of the MP3 inside, where the
render's captions say it is heard."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from tests.integration.test_feeds import make_feed
from tests.integration.test_render_presets import render
from tests.integration.test_render_tags import book_job
from tests.integration.test_renders import CHAPTERS, TONES, builders_end, fetch
from tests.support.render_audio import finished_job, parse_cues

__all__ = ["builders_end"]

# Debian's epubcheck is a jar that binfmt_misc would run; in a container without it,
# java runs it.
EPUBCHECK = "/usr/bin/epubcheck"
SMIL = "{http://www.w3.org/ns/SMIL}"
XHTML = "{http://www.w3.org/1999/xhtml}"
OPF = "{http://www.idpf.org/2007/opf}"
# A check is a few seconds of one JVM: the client compiler only and the serial collector
# take it from about 8 CPU-seconds to about 3 (measured on the CI machine's kind).
QUICK_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def epubcheck(path: Path) -> str:
    """epubcheck's report; the test fails on any error or warning."""
    java = shutil.which("java")
    assert java and Path(EPUBCHECK).exists(), "apt-get install epubcheck (and its Java)"
    done = subprocess.run(
        [java, *QUICK_JVM, "-jar", EPUBCHECK, str(path)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert not re.search(r"^(ERROR|FATAL|WARNING)", report, re.MULTILINE), report
    assert "No errors or warnings detected" in report, report
    return report


def clock(value: str) -> float:
    hours, minutes, seconds = value.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def test_epub_render_is_a_read_along_book_that_passes_epubcheck(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord, tmp_path: Path
) -> None:
    job_id = finished_job(svc, admin, TONES, chapters=CHAPTERS, title="A <read> & along")
    done = render(client, auth, job_id, format="epub")
    assert done["format"] == "epub"
    status, mimetype, data = fetch(client, done["download_url"], auth)
    assert (status, mimetype) == (200, "application/epub+zip")
    path = tmp_path / "book.epub"
    path.write_bytes(data)
    epubcheck(path)

    cues = parse_cues(fetch(client, done["captions"]["vtt"], auth)[2].decode())
    with zipfile.ZipFile(io.BytesIO(data)) as epub:
        assert epub.namelist()[0] == "mimetype"
        assert epub.getinfo("mimetype").compress_type == zipfile.ZIP_STORED
        package = ET.fromstring(epub.read("EPUB/package.opf"))
        assert package.findtext(f"{OPF}metadata/{{http://purl.org/dc/elements/1.1/}}title") == (
            "A <read> & along"
        )
        assert epub.read("EPUB/audio/book.mp3")[:3] == b"ID3"
        pars = []
        for n in (1, 2):
            page = ET.fromstring(epub.read(f"EPUB/chapter-00{n}.xhtml"))
            smil = ET.fromstring(epub.read(f"EPUB/chapter-00{n}.smil"))
            ids = {e.get("id"): e.text for e in page.iter() if e.get("id")}
            for par in smil.iter(f"{SMIL}par"):
                text, audio = par.find(f"{SMIL}text"), par.find(f"{SMIL}audio")
                assert text is not None and audio is not None
                page_name, anchor = text.get("src", "").split("#")
                assert page_name == f"chapter-00{n}.xhtml"
                pars.append(
                    (
                        clock(audio.get("clipBegin", "")),
                        clock(audio.get("clipEnd", "")),
                        ids[anchor],
                    )
                )
        # The first chapter's heading is its title; then every item, in order, where the
        # captions (and so the audio) have it.
        assert [text for _, _, text in pars] == [tone.text for tone in TONES]
        for (begin, end, _), (start, stop, _) in zip(pars, cues, strict=True):
            assert abs(begin - start) < 0.002 and abs(end - stop) < 0.002


def test_feed_publishes_audio_renders_not_books(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord, tmp_path: Path
) -> None:
    job_id = book_job(client, auth, svc, admin)  # an author and a JPEG cover
    audio = render(client, auth, job_id, format="mp3")
    book = render(client, auth, job_id, format="epub")
    path = tmp_path / "book.epub"
    path.write_bytes(fetch(client, book["download_url"], auth)[2])
    epubcheck(path)
    with zipfile.ZipFile(path) as epub:
        assert "EPUB/cover.jpg" in epub.namelist()
    feed = fetch(client, make_feed(client, auth, job_id), {})[2]
    guids = [g.text for g in ET.fromstring(feed).iter("guid")]
    assert guids == [f"render-{audio['id']}"]
