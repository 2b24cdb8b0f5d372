"""Podcast feeds, on both databases: the RSS document parsed with ElementTree, every URL
it names fetched without signing in, and the secret's life (replaced, revoked, another
organization's job)."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
import zipfile
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import mutagen.mp3
import pytest
from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import create_token
from tests.conftest import STORAGES
from tests.helpers import new_admin
from tests.integration.test_pages import browser, text_of
from tests.integration.test_render_presets import render
from tests.integration.test_render_tags import CHAPTERS as BOOK_CHAPTERS
from tests.integration.test_render_tags import book_job
from tests.integration.test_renders import CHAPTERS, TONES, builders_end, fetch
from tests.support.render_audio import finished_job, parse_cues

__all__ = ["browser", "builders_end"]

ITUNES = "{http://www.itunes.com/dtds/podcast-1.0.dtd}"
PODCAST = "{https://podcastindex.org/namespace/1.0}"


def make_feed(client: FlaskClient, auth: dict[str, str], job_id: int) -> str:
    """POST the job's feed; its URL's path (the test client's host is localhost)."""
    made = client.post(f"/api/jobs/{job_id}/feed", headers=auth)
    assert made.status_code == 201, made.get_json()
    url = made.get_json()["url"]
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc) == ("http", "localhost")
    assert parts.path.startswith("/feeds/") and parts.path.endswith(".xml")
    return parts.path


def public(client: FlaskClient, url: str) -> tuple[int, str, bytes]:
    """GET an absolute URL of the feed with no credentials at all (this client signs
    in by bearer token only, so it carries no session cookie)."""
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc) == ("http", "localhost"), url
    return fetch(client, parts.path, {})


def channel_of(client: FlaskClient, path: str) -> ET.Element:
    status, mimetype, body = fetch(client, path, {})
    assert (status, mimetype) == (200, "application/rss+xml"), body[:200]
    root = ET.fromstring(body)
    assert (root.tag, root.get("version")) == ("rss", "2.0")
    channel = root.find("channel")
    assert channel is not None
    return channel


def test_feed_of_a_render_has_one_episode_with_chapters_and_transcript(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = book_job(client, auth, svc, admin)
    feed = make_feed(client, auth, job_id)
    assert channel_of(client, feed).findall("item") == []  # nothing rendered yet
    done = render(client, auth, job_id, format="mp3")

    channel = channel_of(client, feed)
    assert channel.findtext("title") == 'Dr. Jekyll / Mr. Hyde: "Strange Case" \u2014 \u00e9dition'
    assert channel.findtext(f"{ITUNES}author") == "R. L. Stevenson"
    image = channel.find(f"{ITUNES}image")
    assert image is not None
    assert public(client, image.get("href", ""))[:2] == (200, "image/jpeg")
    (item,) = channel.findall("item")
    assert item.findtext("guid") == f"render-{done['id']}"
    assert parsedate_to_datetime(item.findtext("pubDate") or "").tzinfo is not None
    seconds = round(done["duration_seconds"])
    assert item.findtext(f"{ITUNES}duration") == f"0:{seconds // 60:02d}:{seconds % 60:02d}"

    enclosure = item.find("enclosure")
    assert enclosure is not None and enclosure.get("type") == "audio/mpeg"
    status, mimetype, audio = public(client, enclosure.get("url", ""))
    assert (status, mimetype) == (200, "audio/mpeg")
    assert int(enclosure.get("length", "")) == len(audio)
    assert audio == fetch(client, done["download_url"], auth)[2]

    chapters = item.find(f"{PODCAST}chapters")
    assert chapters is not None and chapters.get("type") == "application/json+chapters"
    status, mimetype, body = public(client, chapters.get("url", ""))
    assert (status, mimetype) == (200, "application/json+chapters")
    listed = json.loads(body)
    assert listed["version"] == "1.2.0"
    assert [c["title"] for c in listed["chapters"]] == [t for _, t in BOOK_CHAPTERS]
    assert [c["startTime"] for c in listed["chapters"]] == [
        c["start_seconds"] for c in done["chapters"]
    ]

    transcript = item.find(f"{PODCAST}transcript")
    assert transcript is not None and transcript.get("type") == "text/vtt"
    status, mimetype, vtt = public(client, transcript.get("url", ""))
    assert (status, mimetype) == (200, "text/vtt")
    assert [c[2] for c in parse_cues(vtt.decode())] == [c[2] for c in _cues(client, auth, done)]


def _cues(client: FlaskClient, auth: dict[str, str], done: Any) -> list[tuple[float, float, str]]:
    return parse_cues(fetch(client, done["captions"]["vtt"], auth)[2].decode())


# On a bucket the stored ZIP cannot seek: its chapter files are read from a spooled copy.
@pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
def test_acx_render_is_one_episode_per_chapter_file(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES, chapters=CHAPTERS, title="A Book")
    done = render(client, auth, job_id, preset="acx")
    channel = channel_of(client, make_feed(client, auth, job_id))
    assert channel.find(f"{ITUNES}image") is None  # no cover, no image
    items = channel.findall("item")
    assert [i.findtext("title") for i in items] == [title for _, title in CHAPTERS]
    assert [i.findtext(f"{ITUNES}episode") for i in items] == ["1", "2"]
    dates = [parsedate_to_datetime(i.findtext("pubDate") or "") for i in items]
    assert dates == sorted(dates) and len(set(dates)) == 2
    with zipfile.ZipFile(io.BytesIO(fetch(client, done["chapter_files_url"], auth)[2])) as zipped:
        files = [zipped.read(name) for name in zipped.namelist()]
    heard: list[list[tuple[float, float, str]]] = []
    for item, expected in zip(items, files, strict=True):
        enclosure = item.find("enclosure")
        assert enclosure is not None
        status, mimetype, audio = public(client, enclosure.get("url", ""))
        assert (status, mimetype) == (200, "audio/mpeg")
        assert audio == expected and int(enclosure.get("length", "")) == len(audio)
        info = mutagen.mp3.MP3(io.BytesIO(audio)).info
        assert info is not None
        length = info.length
        transcript = item.find(f"{PODCAST}transcript")
        assert transcript is not None and transcript.get("type") == "text/vtt"
        status, mimetype, vtt = public(client, transcript.get("url", ""))
        assert (status, mimetype) == (200, "text/vtt")
        heard.append(parse_cues(vtt.decode()))
        duration = item.findtext(f"{ITUNES}duration") or ""
        assert abs(int(duration.rsplit(":", 1)[-1]) - length) <= 1.0, (duration, length)
    # Each chapter file's transcript has that chapter's cues, timed after its room tone.
    whole = parse_cues(fetch(client, done["captions"]["vtt"], auth)[2].decode())
    assert [[text for _, _, text in cues] for cues in heard] == [
        [text for _, _, text in whole[:3]],
        [text for _, _, text in whole[3:]],
    ]
    chapter_start = done["chapters"][1]["start_seconds"]
    head = heard[0][0][0]
    assert 0.5 <= head <= 1.0  # ACX's room tone at a file's head
    for (start, end, _), (whole_start, whole_end, _) in zip(heard[1], whole[3:], strict=True):
        assert abs(start - (whole_start - chapter_start + head)) < 0.002
        assert abs(end - (whole_end - chapter_start + head)) < 0.002
    # A range, as podcast apps ask for one.
    first = urlsplit(items[0].find("enclosure").get("url", "")).path  # type: ignore[union-attr]
    with client.get(first, headers={"Range": "bytes=10-19"}) as ranged:
        assert (ranged.status_code, ranged.get_data()) == (206, files[0][10:20])


def test_revoked_and_replaced_feeds_answer_404(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES, chapters=CHAPTERS)
    render(client, auth, job_id, format="mp3")
    first = make_feed(client, auth, job_id)
    enclosure = channel_of(client, first).find("item/enclosure")
    assert enclosure is not None
    audio = urlsplit(enclosure.get("url", "")).path
    assert fetch(client, audio, {})[0] == 200

    second = make_feed(client, auth, job_id)  # a second POST replaces the secret
    assert second != first
    assert fetch(client, first, {})[0] == 404
    assert fetch(client, audio, {})[0] == 404
    assert channel_of(client, second).find("item") is not None

    assert client.delete(f"/api/jobs/{job_id}/feed", headers=auth).status_code == 204
    assert fetch(client, second, {})[0] == 404
    assert client.delete(f"/api/jobs/{job_id}/feed", headers=auth).status_code == 404
    assert fetch(client, "/feeds/not-a-secret.xml", {})[0] == 404


def test_another_organizations_job_has_no_feed_for_you(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES)
    stranger = new_admin(svc, "Elsewhere", "stranger@example.com")
    theirs = {"Authorization": f"Bearer {create_token(svc.uow_factory, stranger.email)}"}
    assert client.post(f"/api/jobs/{job_id}/feed", headers=theirs).status_code == 404
    assert client.delete(f"/api/jobs/{job_id}/feed", headers=theirs).status_code == 404
    assert client.post(f"/api/jobs/{job_id}/feed").status_code == 401
    feed = make_feed(client, auth, job_id)
    assert client.delete(f"/api/jobs/{job_id}/feed", headers=theirs).status_code == 404
    assert fetch(client, feed, {})[0] == 200  # still the owner's
    # A render of another job is not served under this job's secret.
    other = finished_job(svc, admin, TONES, title="other")
    done = render(client, auth, other, format="mp3")
    secret_root = feed.removesuffix(".xml")
    assert fetch(client, f"{secret_root}/renders/{done['id']}/audio.mp3", {})[0] == 404
    assert fetch(client, f"{secret_root}/renders/{done['id']}/chapters.json", {})[0] == 404
    assert fetch(client, f"{secret_root}/cover.jpg", {})[0] == 404


def test_job_page_makes_shows_and_turns_off_the_feed(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, token = browser
    job_id = finished_job(svc, admin, TONES)
    page = text_of(client.get(f"/jobs/{job_id}"))
    assert 'id="btn-feed"' in page and "Make a feed URL" in page
    assert 'id="btn-feed-revoke"' not in page
    made = client.post(f"/jobs/{job_id}/feed", data={"csrf_token": token})
    assert made.status_code == 302
    page = text_of(client.get(f"/jobs/{job_id}"))
    match = re.search(r"http://localhost(/feeds/[A-Za-z0-9_-]+\.xml)", page)
    assert match, "the new feed URL is shown once"
    assert "On since" in page and 'id="btn-feed-revoke"' in page
    assert match.group(1) not in text_of(client.get(f"/jobs/{job_id}"))  # only once
    assert fetch(client, match.group(1), {})[0] == 200
    # Without the form's CSRF token nothing changes.
    assert client.post(f"/jobs/{job_id}/feed/revoke").status_code == 400
    assert fetch(client, match.group(1), {})[0] == 200
    revoked = client.post(f"/jobs/{job_id}/feed/revoke", data={"csrf_token": token})
    assert revoked.status_code == 302
    page = text_of(client.get(f"/jobs/{job_id}"))
    assert "Podcast feed revoked" in page and "Make a feed URL" in page
    assert fetch(client, match.group(1), {})[0] == 404
