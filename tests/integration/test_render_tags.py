"""What players read from a render, on both databases: tags and cover (mutagen, as tag
readers do), chapters in time order (FFmpeg through PyAV, as ffprobe-based players do;
both of an M4B's chapter formats parsed from its atoms) and the download's name."""

from __future__ import annotations

import io

import av
import mutagen.id3
import mutagen.mp4
from flask.testing import FlaskClient
from PIL import Image
from werkzeug.http import parse_options_header

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from tests.integration.test_renders import builders_end, fetch, start, wait_ended
from tests.support.mp4_chapters import nero_chapters, quicktime_chapters
from tests.support.render_audio import Tone, finished_job

# Titles whose sizes are not in time order: stored by size, they came out "Imprint,
# Colophon, Titlepage, ...".
TONES = [Tone(f"Item {n}.", 0.4 + 0.1 * n, 300 + 40 * n, 0.2) for n in range(6)]
CHAPTERS = [(1, "Titlepage"), (2, "Imprint"), (3, "The first chapter, a long one"),
            (5, "Colophon"), (6, "Uncopyright")]  # fmt: skip
TITLES = [title for _, title in CHAPTERS]
BOOK = 'Dr. Jekyll / Mr. Hyde: "Strange Case" \u2014 \u00e9dition'


def image(kind: str, size: tuple[int, int] = (48, 32)) -> bytes:
    """A small real image of that format."""
    out = io.BytesIO()
    Image.new("RGB", size, (200, 40, 90)).save(out, format=kind)
    return out.getvalue()


def book_job(client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord) -> int:
    """A finished job with chapters, an author and a JPEG cover."""
    job_id = finished_job(svc, admin, TONES, chapters=CHAPTERS, title=BOOK)
    patched = client.patch(
        f"/api/jobs/{job_id}", json={"author": " R. L. Stevenson "}, headers=auth
    )
    assert patched.status_code == 200, patched.get_json()
    put = client.put(f"/api/jobs/{job_id}/cover", data=image("JPEG"), headers=auth)
    assert put.status_code == 200, put.get_json()
    return job_id


def rendered(client: FlaskClient, auth: dict[str, str], job_id: int, fmt: str) -> bytes:
    done = wait_ended(client, auth, job_id, start(client, auth, job_id, format=fmt)["id"])
    assert done["status"] == "COMPLETED", done
    status, _, audio = fetch(client, done["download_url"], auth)
    assert status == 200
    return audio


def ffmpeg_chapters(audio: bytes) -> list[tuple[str, float]]:
    """The chapters as FFmpeg lists them (ffprobe, and players built on it)."""
    with av.open(io.BytesIO(audio), mode="r") as container:
        return [
            (c["metadata"]["title"], float(c["start"] * (c["time_base"] or 1)))
            for c in container.chapters()
        ]


def test_mp3_chapters_are_listed_in_time_order(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    audio = rendered(client, auth, book_job(client, auth, svc, admin), "mp3")
    listed = ffmpeg_chapters(audio)
    assert [title for title, _ in listed] == TITLES
    assert [start for _, start in listed] == sorted(start for _, start in listed)
    tags = mutagen.id3.ID3(io.BytesIO(audio))
    (toc,) = tags.getall("CTOC")
    marks = {frame.element_id: frame for frame in tags.getall("CHAP")}
    assert [str(marks[i].sub_frames["TIT2"]) for i in toc.child_element_ids] == TITLES


def test_mp3_carries_title_author_narrator_year_and_cover(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = book_job(client, auth, svc, admin)
    audio = rendered(client, auth, job_id, "mp3")
    # As stored (mutagen would otherwise turn 2.3's TYER into 2.4's TDRC).
    tags = mutagen.id3.ID3(io.BytesIO(audio), translate=False)
    assert tags.version[:2] == (2, 3)
    assert str(tags["TIT2"]) == BOOK
    assert str(tags["TALB"]) == BOOK
    assert str(tags["TPE1"]) == "R. L. Stevenson"
    assert str(tags["TCOM"]) == "alloy"  # the narrator: the voice that spoke it
    year = client.get(f"/api/jobs/{job_id}/renders", headers=auth).get_json()["renders"][0]
    assert str(tags["TYER"]) == year["created_at"][:4]
    (cover,) = tags.getall("APIC")
    assert (cover.mime, cover.type, cover.data) == ("image/jpeg", 3, image("JPEG"))


def test_m4b_has_both_chapter_formats_tags_and_cover(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    audio = rendered(client, auth, book_job(client, auth, svc, admin), "m4b")
    by_ffmpeg = ffmpeg_chapters(audio)
    assert [title for title, _ in by_ffmpeg] == TITLES
    for read in (quicktime_chapters(audio), nero_chapters(audio)):
        assert [title for title, _ in read] == TITLES
        for (_, at), (_, expected) in zip(read, by_ffmpeg, strict=True):
            assert abs(at - expected) < 0.002
    tags = mutagen.mp4.MP4(io.BytesIO(audio)).tags
    assert tags is not None
    assert tags["\xa9nam"] == [BOOK] and tags["\xa9alb"] == [BOOK]
    assert tags["\xa9ART"] == ["R. L. Stevenson"] and tags["\xa9wrt"] == ["alloy"]
    assert len(tags["\xa9day"][0]) == 4
    (cover,) = tags["covr"]
    assert bytes(cover) == image("JPEG")
    assert cover.imageformat == mutagen.mp4.MP4Cover.FORMAT_JPEG


def test_downloads_are_named_after_the_title(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES[:2], title=BOOK)
    done = wait_ended(client, auth, job_id, start(client, auth, job_id, format="mp3")["id"])
    expected = {
        done["download_url"]: "Dr. Jekyll Mr. Hyde Strange Case \u2014 \u00e9dition.mp3",
        done["captions"]["vtt"]: "Dr. Jekyll Mr. Hyde Strange Case \u2014 \u00e9dition.vtt",
    }
    for url, name in expected.items():
        with client.get(url, headers=auth) as response:
            header = response.headers["Content-Disposition"]
        _, params = parse_options_header(header)
        # RFC 6266: the UTF-8 name in filename*, and an ASCII one for old clients.
        assert params["filename"] == name, header
        assert "filename*=UTF-8''" in header
        assert header.isascii()


__all__ = ["builders_end"]  # every render builder of a test ends before its app does
