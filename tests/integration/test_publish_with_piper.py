"""Issue 43's "Done when", end to end with the quick start's offline voice, on both
databases: a real EPUB (title, author, cover, front matter, two chapters of Stevenson, a
style sheet and an image) is imported through the JSON API, spoken by Piper's
``en_US-joe-medium``, and comes out as an M4B with chapters, tags, cover and subtitles, a
read-along EPUB that epubcheck passes, ACX chapter files that pass ACX's rules, and a
podcast feed of them that anyone with its URL reads. Every file is decoded or parsed here,
not taken on the app's word. The second test holds a render without a preset to its
loudness target: Piper's peaks stand far above its speech, so the limiter takes 1-2 LU off
a plain gain to -18 LUFS, which the render must make up for."""

from __future__ import annotations

import io
import json
import posixpath
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mutagen.id3
import mutagen.mp4
import pyloudnorm
import pytest
from flask import Flask
from flask.testing import FlaskClient

from speechbatch import create_app
from speechbatch.adapters.providers.piper import PiperProvider
from speechbatch.config import Settings
from speechbatch.domain.documents import squeeze
from speechbatch.runner.render_builder import wait_for_renders
from speechbatch.services import create_token
from tests.conftest import close_services, services, with_settings
from tests.helpers import new_admin, wait_for
from tests.integration.test_feeds import ITUNES, PODCAST, channel_of, make_feed, public
from tests.integration.test_import_api import _import
from tests.integration.test_read_along import OPF, SMIL, clock, epubcheck
from tests.integration.test_render_tags import ffmpeg_chapters
from tests.integration.test_renders import fetch, start, wait_ended
from tests.support.caption_timing import cue_offsets, summary
from tests.support.epubs import BOOK_AUTHOR, BOOK_TITLE, cover_png, png_bytes
from tests.support.mp4_chapters import nero_chapters, quicktime_chapters
from tests.support.publish_book import CHAPTERS, CSS, build_publish_epub, spoken_chapters
from tests.support.render_audio import (
    decode_all,
    mp3_frame_bit_rates,
    noise_floor_db,
    parse_cues,
    quiet_ends,
    rms_db,
    true_peak_db,
)

VOICE = "en_US-joe-medium"  # the quick start's bundled voice
Auth = dict[str, str]


@pytest.fixture(scope="module")
def piper() -> Iterator[PiperProvider]:
    """Piper as the quick start runs it: its own processes, one per core."""
    provider = PiperProvider()
    yield provider
    provider.close()


@pytest.fixture
def piper_app(settings: Settings, piper: PiperProvider) -> Iterator[Flask]:
    """The app with ``piper`` as its provider (as the quick start configures it); every
    render builder ends before the app and its database go away."""
    app = create_app(with_settings(settings, tts_provider="piper"), provider=piper)
    app.config["TESTING"] = True
    try:
        yield app
        assert wait_for_renders(60), "a render builder was still running"
    finally:
        close_services(services(app))


def _signed_in(app: Flask) -> tuple[FlaskClient, Auth]:
    """A test client and a new admin's bearer token, as a script would hold them."""
    svc = services(app)
    admin = new_admin(svc, "acme", "admin@acme.test")
    return app.test_client(), {
        "Authorization": f"Bearer {create_token(svc.uow_factory, admin.email)}"
    }


def _spoken(texts: list[str]) -> str:
    return squeeze(" ".join(texts))


def _import_book(client: FlaskClient, auth: Auth) -> Any:
    """Import the EPUB with no title: the book's own title, author, cover and chapters,
    its front matter left out."""
    imported = _import(client, auth, "jekyll.epub", build_publish_epub(), voice=VOICE, title="")
    assert imported.status_code == 201, imported.get_json()
    job = imported.get_json()
    assert (job["title"], job["author"], job["voice"]) == (BOOK_TITLE, BOOK_AUTHOR, VOICE)
    kept = {c["title"]: c["kept"] for c in job["document"]["chapters"]}
    assert kept["Title Page"] is False and kept["Imprint"] is False
    assert [t for t, k in kept.items() if k] == CHAPTERS
    assert [c["title"] for c in job["chapters"]] == CHAPTERS
    assert _spoken([i["text"] for i in job["items"]]) == _spoken(spoken_chapters())
    with client.get(job["cover_url"], headers=auth) as cover:
        assert (cover.status_code, cover.get_data()) == (200, cover_png())
    return job


def _generate(client: FlaskClient, auth: Auth, job_id: int) -> Any:
    """Generate with Piper and wait for COMPLETED; every item is timed word by word."""
    assert client.post(f"/api/jobs/{job_id}/generate", headers=auth).status_code == 202

    def ended() -> Any:
        job = client.get(f"/api/jobs/{job_id}", headers=auth).get_json()
        return job if job["status"] != "GENERATING" else None

    job = wait_for(ended, timeout=240, interval=0.2)
    assert job["status"] == "COMPLETED", job
    for item in job["items"]:
        assert item["status"] == "DONE" and item["suspect"] is None, item
        response = client.get(f"/api/jobs/{job_id}/items/{item['id']}/timing", headers=auth)
        assert response.status_code == 200, response.get_json()
        timing = response.get_json()
        assert timing["level"] == "word", (item["text"], timing)
        assert [w["text"] for w in timing["words"]] == item["spoken_text"].split()
        assert _spoken([s["text"] for s in timing["sentences"]]) == squeeze(item["spoken_text"])
        starts = [w["start_seconds"] for w in timing["words"]]
        assert starts == sorted(starts) and 0 <= starts[0] < starts[-1]
        assert timing["words"][-1]["end_seconds"] <= item["duration_seconds"] + 0.05
    return job


def _render(client: FlaskClient, auth: Auth, job_id: int, **body: Any) -> Any:
    started = start(client, auth, job_id, **body)
    done = wait_ended(client, auth, job_id, started["id"])
    assert done["status"] == "COMPLETED", done
    return done


def _check_subtitles(client: FlaskClient, auth: Auth, done: Any, audio: bytes) -> None:
    """VTT and SRT: the same cues, each at most 7 s and two lines of 42 characters, the
    whole spoken text in order, starting where their speech starts."""
    vtt = fetch(client, done["captions"]["vtt"], auth)
    srt = fetch(client, done["captions"]["srt"], auth)
    assert (vtt[0], vtt[1], srt[0], srt[1]) == (200, "text/vtt", 200, "application/x-subrip")
    assert vtt[2].decode().startswith("WEBVTT")
    cues = parse_cues(srt[2].decode())
    assert parse_cues(vtt[2].decode()) == cues
    assert len(cues) > len(CHAPTERS) * 2  # long items are cut into several cues
    for cue_start, cue_end, text in cues:
        assert 0 <= cue_start < cue_end <= done["duration_seconds"] + 0.05
        assert cue_end - cue_start <= 7.0, (cue_start, cue_end, text)
        lines = text.split("\n")
        assert len(lines) <= 2 and all(len(line) <= 42 for line in lines), text
    assert _spoken([t.replace("\n", " ") for _, _, t in cues]) == _spoken(spoken_chapters())
    # Where a cue follows a sentence or clause end, the voice paused: its start is heard
    # as an onset after silence. (A cue that a long clause's cut at a word begins has no
    # pause before it to find.)
    after_pause = [0] + [n for n in range(1, len(cues)) if cues[n - 1][2][-1] in ".,;:!?"]
    offsets = cue_offsets(audio, srt[2].decode())
    figures = summary([offsets[n] for n in after_pause])
    print(f"Piper M4B: cue starts after a pause against speech onsets: {figures}")
    assert figures["cues"] >= len(cues) // 2 and figures["within"] >= 0.9, figures


def _check_m4b(client: FlaskClient, auth: Auth, job_id: int) -> tuple[Any, bytes]:
    """The M4B: the book's chapters in both formats, its title, author and cover, and
    subtitles."""
    done = _render(client, auth, job_id, format="m4b")
    assert [c["title"] for c in done["chapters"]] == CHAPTERS
    status, mimetype, audio = fetch(client, done["download_url"], auth)
    assert (status, mimetype) == (200, "audio/mp4")
    listed = ffmpeg_chapters(audio)
    assert [title for title, _ in listed] == CHAPTERS
    for read in (quicktime_chapters(audio), nero_chapters(audio)):
        assert [title for title, _ in read] == CHAPTERS
        for (_, at), (_, expected) in zip(read, listed, strict=True):
            assert abs(at - expected) < 0.002
    for (_, at), chapter in zip(listed, done["chapters"], strict=True):
        assert abs(at - chapter["start_seconds"]) < 0.05
    tags = mutagen.mp4.MP4(io.BytesIO(audio)).tags
    assert tags is not None
    assert tags["\xa9nam"] == [BOOK_TITLE] and tags["\xa9alb"] == [BOOK_TITLE]
    assert tags["\xa9ART"] == [BOOK_AUTHOR]
    (cover,) = tags["covr"]
    assert bytes(cover) == cover_png() and cover.imageformat == mutagen.mp4.MP4Cover.FORMAT_PNG
    samples, rate = decode_all(audio)
    assert abs(len(samples) / rate - done["duration_seconds"]) < 0.1
    assert done["duration_seconds"] > 30  # about a thousand characters of speech
    _check_subtitles(client, auth, done, audio)
    return done, audio


def _overlays(epub: zipfile.ZipFile) -> list[tuple[str, str, float, float]]:
    """(synced text, audio entry, clip begin, clip end) of every SMIL ``par``, in spine
    order; each text and audio reference resolved to an entry of the book."""
    names = set(epub.namelist())
    package_path = ET.fromstring(epub.read("META-INF/container.xml"))[0][0].get("full-path", "")
    base = posixpath.dirname(package_path)
    package = ET.fromstring(epub.read(package_path))
    items = {i.get("id"): i for i in package.iter(f"{OPF}item")}
    found = []
    for ref in package.iter(f"{OPF}itemref"):
        page = items[ref.get("idref")]
        if page.get("media-overlay") is None:
            continue
        smil_path = posixpath.join(base, items[page.get("media-overlay")].get("href", ""))
        tree = ET.fromstring(epub.read(posixpath.join(base, page.get("href", ""))))
        texts = {e.get("id"): squeeze("".join(e.itertext())) for e in tree.iter() if e.get("id")}
        for par in ET.fromstring(epub.read(smil_path)).iter(f"{SMIL}par"):
            text, audio = par.find(f"{SMIL}text"), par.find(f"{SMIL}audio")
            assert text is not None and audio is not None
            source = posixpath.normpath(
                posixpath.join(posixpath.dirname(smil_path), audio.get("src", ""))
            )
            assert source in names, (source, sorted(names))
            anchor = text.get("src", "").rpartition("#")[2]
            begin, end = clock(audio.get("clipBegin", "")), clock(audio.get("clipEnd", ""))
            found.append((texts[anchor], source, begin, end))
    return found


def _check_read_along(client: FlaskClient, auth: Auth, job_id: int, tmp_path: Path) -> None:
    """The read-along EPUB: epubcheck finds nothing; the book's own style sheet and image
    are in it; its Media Overlays sync the whole spoken text to its audio."""
    done = _render(client, auth, job_id, format="epub")
    status, mimetype, data = fetch(client, done["download_url"], auth)
    assert (status, mimetype) == (200, "application/epub+zip")
    path = tmp_path / "read-along.epub"
    path.write_bytes(data)
    epubcheck(path)
    with zipfile.ZipFile(io.BytesIO(data)) as epub:
        entries = {name: epub.read(name) for name in epub.namelist()}
        synced = _overlays(epub)
    assert (
        [n for n, d in entries.items() if n.endswith("style/book.css")]
        == [n for n, d in entries.items() if d == CSS.encode()]
        != []
    )
    assert any(n.endswith("images/door.png") and d == png_bytes() for n, d in entries.items())
    assert any(d == cover_png() for d in entries.values())
    assert _spoken([text for text, _, _, _ in synced]) == _spoken(spoken_chapters())
    (audio_name,) = {source for _, source, _, _ in synced}
    samples, rate = decode_all(entries[audio_name])
    seconds = len(samples) / rate
    clips = [(begin, end) for _, _, begin, end in synced]
    assert clips == sorted(clips)
    assert all(0 <= begin < end <= seconds + 0.05 for begin, end in clips), (clips, seconds)


def _check_acx_file(data: bytes, number: int, reported: Any) -> None:
    """One ACX chapter file, decoded and measured here against ACX's rules."""
    kbps, rates, frames = mp3_frame_bit_rates(data)
    assert (kbps, rates) == ({192}, {44100}) and frames > 100  # CBR: every frame
    tags = mutagen.id3.ID3(io.BytesIO(data))
    assert (str(tags["TRCK"]), str(tags["TALB"])) == (f"{number}/{len(CHAPTERS)}", BOOK_TITLE)
    samples, rate = decode_all(data)
    assert rate == 44100 and len(samples) / rate > 5.0
    assert -23.0 <= rms_db(samples) <= -18.0
    assert true_peak_db(samples) <= -3.0
    assert noise_floor_db(samples, rate) <= -60.0
    head, tail = quiet_ends(samples, rate)
    assert 0.5 <= head <= 1.0 and 1.0 <= tail <= 5.0, (head, tail)
    assert abs(reported["seconds"] - len(samples) / rate) < 0.05


def _check_acx(client: FlaskClient, auth: Auth, job_id: int) -> tuple[Any, list[bytes]]:
    """The ACX render: its report passes every rule, and each chapter's file does."""
    done = _render(client, auth, job_id, preset="acx")
    assert (done["format"], done["preset"]) == ("mp3", "acx")
    check = done["check"]
    assert (check["preset"], check["passed"], check["failures"]) == ("acx", True, []), check
    assert -23.0 <= check["rms_db"] <= -18.0 and check["true_peak_dbtp"] <= -3.0
    assert check["noise_floor_db"] <= -60.0
    assert [c["title"] for c in check["chapters"]] == CHAPTERS
    for chapter in check["chapters"]:
        assert -23.0 <= chapter["rms_db"] <= -18.0 and chapter["true_peak_dbtp"] <= -3.0
    status, mimetype, archive = fetch(client, done["chapter_files_url"], auth)
    assert (status, mimetype) == (200, "application/zip")
    with zipfile.ZipFile(io.BytesIO(archive)) as zipped:
        names = zipped.namelist()
        files = [zipped.read(name) for name in names]
    assert len(names) == len(CHAPTERS) and names[0] == "01 Story of the Door.mp3", names
    for number, (data, reported) in enumerate(zip(files, check["chapters"], strict=True), 1):
        _check_acx_file(data, number, reported)
    book = fetch(client, done["download_url"], auth)[2]
    assert mp3_frame_bit_rates(book)[:2] == ({192}, {44100})
    return done, files


def _channel(client: FlaskClient, feed: str) -> ET.Element:
    """The feed, read with no credentials: RSS 2.0 with the iTunes namespace and the
    book's title, author and cover."""
    channel = channel_of(client, feed)
    assert channel.findtext("title") == BOOK_TITLE
    assert channel.findtext(f"{ITUNES}author") == BOOK_AUTHOR
    image = channel.find(f"{ITUNES}image")
    assert image is not None and public(client, image.get("href", ""))[2] == cover_png()
    return channel


def _heard(client: FlaskClient, episode: ET.Element) -> list[tuple[float, float, str]]:
    """The cues of an episode's ``podcast:transcript``, fetched with no credentials."""
    transcript = episode.find(f"{PODCAST}transcript")
    assert transcript is not None and transcript.get("type") == "text/vtt"
    status, mimetype, vtt = public(client, transcript.get("url", ""))
    assert (status, mimetype) == (200, "text/vtt")
    return parse_cues(vtt.decode())


def _check_book_feed(client: FlaskClient, auth: Auth, job_id: int, m4b: Any, audio: bytes) -> str:
    """The job's feed with the M4B as its newest render: one episode, the M4B itself,
    with its chapters (JSON) and its transcript; the feed's path."""
    feed = make_feed(client, auth, job_id)
    (episode,) = _channel(client, feed).findall("item")
    enclosure = episode.find("enclosure")
    assert enclosure is not None
    assert public(client, enclosure.get("url", ""))[::2] == (200, audio)
    chapters = episode.find(f"{PODCAST}chapters")
    assert chapters is not None and chapters.get("type") == "application/json+chapters"
    status, mimetype, body = public(client, chapters.get("url", ""))
    assert (status, mimetype) == (200, "application/json+chapters")
    listed = json.loads(body)["chapters"]
    assert [(c["title"], c["startTime"]) for c in listed] == [
        (c["title"], c["start_seconds"]) for c in m4b["chapters"]
    ]
    whole = parse_cues(fetch(client, m4b["captions"]["vtt"], auth)[2].decode())
    assert _heard(client, episode) == whole
    return feed


def _check_chapter_feed(client: FlaskClient, feed: str, files: list[bytes]) -> None:
    """The same feed once the ACX render is the newest: one episode per chapter file,
    each with its audio and its chapter's transcript."""
    episodes = _channel(client, feed).findall("item")
    assert [e.findtext("title") for e in episodes] == CHAPTERS
    assert [e.findtext(f"{ITUNES}episode") for e in episodes] == ["1", "2"]
    for episode, expected, heard in zip(episodes, files, spoken_chapters(), strict=True):
        enclosure = episode.find("enclosure")
        assert enclosure is not None and enclosure.get("type") == "audio/mpeg"
        status, mimetype, audio = public(client, enclosure.get("url", ""))
        assert (status, mimetype, audio) == (200, "audio/mpeg", expected)
        assert int(enclosure.get("length", "")) == len(audio)
        cues = _heard(client, episode)
        assert _spoken([t.replace("\n", " ") for _, _, t in cues]) == squeeze(heard)
        assert 0.5 <= cues[0][0] <= 1.0  # after the file's room tone


def test_a_real_epub_becomes_an_acx_set_an_m4b_a_read_along_and_a_feed_with_piper(
    piper_app: Flask, tmp_path: Path
) -> None:
    client, auth = _signed_in(piper_app)
    job = _import_book(client, auth)
    _generate(client, auth, job["id"])
    m4b, audio = _check_m4b(client, auth, job["id"])
    feed = _check_book_feed(client, auth, job["id"], m4b, audio)
    _check_read_along(client, auth, job["id"], tmp_path)
    _, files = _check_acx(client, auth, job["id"])
    # The feed publishes the newest audio render: now one episode per ACX chapter file.
    _check_chapter_feed(client, feed, files)


def test_a_piper_books_render_without_preset_meets_its_loudness_target(
    piper_app: Flask,
) -> None:
    client, auth = _signed_in(piper_app)
    job = _import_book(client, auth)
    _generate(client, auth, job["id"])
    measured = {}
    for fmt in ("mp3", "m4b"):
        done = _render(client, auth, job["id"], format=fmt)
        samples, rate = decode_all(fetch(client, done["download_url"], auth)[2])
        lufs = pyloudnorm.Meter(rate).integrated_loudness(samples)
        measured[fmt] = (round(lufs, 2), round(true_peak_db(samples), 2), done["check"])
    print(f"default renders (LUFS, dBTP, check): {measured}")
    for lufs, peak, check in measured.values():
        assert peak <= -1.0  # never clips
        assert abs(lufs - -18.0) <= 1.0 and check["passed"] is True, measured
