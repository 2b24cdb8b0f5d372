"""Renders through the API, on both databases, checked by decoding what they wrote.

Items are tones with real MP3 audio written straight into the storage and the database
(``tests/support/render_audio.py``): each decodes to exactly its samples, so the place
where each one starts in the render is known to the sample, and can also be found in the
decoded render itself (the gaps are silent).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import av
import mutagen.id3
import pyloudnorm
import pytest
import soundfile
from flask import Flask
from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.storage import LocalStorage
from speechbatch.app import Services
from speechbatch.runner.render_builder import wait_for_renders
from tests.conftest import STORAGES
from tests.helpers import set_items, wait_for
from tests.support.render_audio import (
    RATE,
    Tone,
    decode_all,
    expected_starts,
    finished_job,
    onsets,
    parse_cues,
)

RENDER_KEYS = {
    "id", "job_id", "status", "format", "error_message", "duration_seconds", "chapters",
    "download_url", "captions", "created_at", "finished_at", "preset", "check",
    "chapter_files_url",
}  # fmt: skip
TONES = [
    Tone("Chapter one.", 0.8, 330, 0.3),
    Tone("The first item, & <more>.", 1.6, 440, 0.05),
    Tone("The second item.", 1.2, 550, 0.2),
    Tone("Chapter two.", 0.7, 330, 0.3),
    Tone("The third item.", 2.1, 660, 0.1),
    Tone("The last item --> ends it.", 1.0, 220, 0.25),
]
CHAPTERS = [(1, "One: the start"), (4, "Two: the end")]


class GatedStorage(LocalStorage):
    """Reads of item audio wait for a gate, so a test can catch a builder mid-render."""

    def __init__(self, root: Path, gate: threading.Event) -> None:
        super().__init__(root)
        self.gate = gate

    def open(self, key: str) -> BinaryIO:
        self.gate.wait(15)
        return super().open(key)


@pytest.fixture(autouse=True)
def builders_end(app: Flask) -> Iterator[None]:
    """Every render builder of the test ends before the app and its database go away."""
    yield
    assert wait_for_renders(30), "a render builder was still running"


def start(client: FlaskClient, auth: dict[str, str], job_id: int, **body: Any) -> Any:
    """POST a render and expect 202."""
    response = client.post(f"/api/jobs/{job_id}/renders", json=body, headers=auth)
    assert response.status_code == 202, response.get_json()
    return response.get_json()


def wait_ended(client: FlaskClient, auth: dict[str, str], job_id: int, render_id: int) -> Any:
    """Poll the render until it is no longer RUNNING."""

    def ended() -> Any:
        body = client.get(f"/api/jobs/{job_id}/renders/{render_id}", headers=auth).get_json()
        return body if body["status"] != "RUNNING" else None

    return wait_for(ended, timeout=60, interval=0.05)


def fetch(client: FlaskClient, url: str, auth: dict[str, str]) -> tuple[int, str, bytes]:
    """GET a file: status, mimetype, body."""
    with client.get(url, headers=auth) as response:
        return response.status_code, response.mimetype or "", response.get_data()


def gaps(gap: float, chapter_gap: float) -> list[float]:
    """The silence before each of TONES (none before the first)."""
    firsts = {first for first, _ in CHAPTERS}
    return [
        0.0 if p == 1 else (chapter_gap if p in firsts else gap) for p in range(1, len(TONES) + 1)
    ]


def check_timing(render: dict[str, Any], audio: bytes, captions: str, starts: list[float]) -> None:
    """Duration, caption cues and the sound itself all agree with the computed starts."""
    samples, rate = decode_all(audio)
    assert rate == RATE
    end = starts[-1] + int(TONES[-1].seconds * RATE) / RATE
    assert abs(len(samples) / rate - end) < 0.05
    assert abs(render["duration_seconds"] - end) < 0.002
    cues = parse_cues(captions)
    assert len(cues) == len(TONES)
    assert cues[2][2] == "The second item."
    for (cue_start, cue_end, _), start, tone in zip(cues, starts, TONES, strict=True):
        assert abs(cue_start - start) < 0.05
        assert abs((cue_end - cue_start) - tone.seconds) < 0.05
    found = onsets(samples, rate)
    assert len(found) == len(TONES), found
    for onset, start in zip(found, starts, strict=True):
        assert abs(onset - start) < 0.05, (found, starts)


@pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
def test_mp3_render_has_chapters_captions_loudness_and_timing(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES, chapters=CHAPTERS)
    started = start(client, auth, job_id, format="mp3", gap_ms=300, chapter_gap_ms=1200)
    assert set(started) == RENDER_KEYS
    assert (started["status"], started["download_url"], started["captions"]) == (
        "RUNNING", None, None,
    )  # fmt: skip
    assert fetch(client, f"/api/jobs/{job_id}/renders/{started['id']}/download", auth)[0] == 404

    done = wait_ended(client, auth, job_id, started["id"])
    assert done["status"] == "COMPLETED", done
    starts = expected_starts(TONES, gaps(0.3, 1.2))
    chapter_two = starts[3]
    assert done["chapters"] == [
        {"title": "One: the start", "start_seconds": 0.0, "end_seconds": round(chapter_two, 3)},
        {
            "title": "Two: the end",
            "start_seconds": round(chapter_two, 3),
            "end_seconds": done["duration_seconds"],
        },
    ]

    status, mimetype, audio = fetch(client, done["download_url"], auth)
    assert (status, mimetype) == (200, "audio/mpeg")
    status, mimetype, vtt = fetch(client, done["captions"]["vtt"], auth)
    assert (status, mimetype) == (200, "text/vtt")
    assert vtt.startswith(b"WEBVTT\n\n")
    status, mimetype, srt = fetch(client, done["captions"]["srt"], auth)
    assert (status, mimetype) == (200, "application/x-subrip")
    check_timing(done, audio, vtt.decode(), starts)
    check_timing(done, audio, srt.decode(), starts)
    # Each cue is the item's text on one line: escaped for WebVTT, never a second "-->".
    assert parse_cues(vtt.decode())[1][2] == "The first item, &amp; &lt;more&gt;."
    assert parse_cues(srt.decode())[1][2] == "The first item, & <more>."
    assert parse_cues(srt.decode())[-1][2] == "The last item -> ends it."

    # The chapters, as a player reads them: ID3v2 CHAP frames under one CTOC.
    tags = mutagen.id3.ID3(io.BytesIO(audio))
    (toc,) = tags.getall("CTOC")
    marks = {frame.element_id: frame for frame in tags.getall("CHAP")}
    assert list(toc.child_element_ids) == sorted(marks)
    titles = [str(marks[i].sub_frames["TIT2"]) for i in toc.child_element_ids]
    assert titles == ["One: the start", "Two: the end"]
    assert [marks[i].start_time for i in toc.child_element_ids] == [0, round(chapter_two * 1000)]

    # Normalized as a whole to the default -18 LUFS, as BS.1770 measures the decoded file.
    samples, rate = decode_all(audio)
    assert abs(pyloudnorm.Meter(rate).integrated_loudness(samples) - -18.0) < 1.0
    # libsndfile agrees on the length (it honours the encoder's gapless info too).
    assert abs(soundfile.info(io.BytesIO(audio)).duration - len(samples) / rate) < 0.03


def test_m4b_render_of_a_job_without_chapters_is_one_chapter_named_after_it(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES, title="A book from lines")
    started = start(client, auth, job_id, format="m4b", loudness_lufs=-24, gap_ms=500)
    done = wait_ended(client, auth, job_id, started["id"])
    assert done["status"] == "COMPLETED", done
    starts = expected_starts(TONES, [0.0] + [0.5] * (len(TONES) - 1))
    assert done["chapters"] == [
        {
            "title": "A book from lines",
            "start_seconds": 0.0,
            "end_seconds": done["duration_seconds"],
        },
    ]
    status, mimetype, audio = fetch(client, done["download_url"], auth)
    assert (status, mimetype) == (200, "audio/mp4")
    check_timing(done, audio, fetch(client, done["captions"]["vtt"], auth)[2].decode(), starts)
    with av.open(io.BytesIO(audio), mode="r") as container:
        assert container.streams.audio[0].codec_context.name == "aac"
        (chapter,) = container.chapters()
    assert chapter["metadata"]["title"] == "A book from lines"
    time_base = chapter["time_base"] or 1
    assert chapter["start"] == 0
    assert abs(float(chapter["end"] * time_base) - done["duration_seconds"]) < 0.002
    samples, rate = decode_all(audio)
    assert abs(pyloudnorm.Meter(rate).integrated_loudness(samples) - -24.0) < 1.0


@pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
def test_m4b_chapters_are_mp4_chapters_at_the_offsets_the_json_gives(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES, chapters=CHAPTERS)
    done = wait_ended(client, auth, job_id, start(client, auth, job_id, format="m4b")["id"])
    assert done["status"] == "COMPLETED", done
    status, _, audio = fetch(client, done["download_url"], auth)
    assert status == 200
    with av.open(io.BytesIO(audio), mode="r") as container:
        chapters = container.chapters()
    read_back = [
        {
            "title": c["metadata"]["title"],
            "start_seconds": float(c["start"] * (c["time_base"] or 1)),
            "end_seconds": float(c["end"] * (c["time_base"] or 1)),
        }
        for c in chapters
    ]
    assert read_back == done["chapters"]
    assert read_back[1]["start_seconds"] == round(expected_starts(TONES, gaps(0.4, 1.5))[3], 3)


def test_render_without_normalization_keeps_the_items_levels(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES)
    done = wait_ended(
        client, auth, job_id, start(client, auth, job_id, format="mp3", loudness_lufs=None)["id"]
    )
    assert done["status"] == "COMPLETED", done
    samples, _ = decode_all(fetch(client, done["download_url"], auth)[2])
    # The loudest tone peaks at 0.3: no gain was applied.
    assert 0.27 < abs(samples).max() < 0.33


def test_render_answers_409_until_every_item_is_done(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES[:2])
    set_items(svc, job_id, status="ERROR", audio_path=None)
    response = client.post(f"/api/jobs/{job_id}/renders", json={"format": "mp3"}, headers=auth)
    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "job_not_complete"
    assert client.get(f"/api/jobs/{job_id}/renders", headers=auth).get_json() == {"renders": []}


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"format": "wav"},
        {"format": "mp3", "gap_ms": -1},
        {"format": "mp3", "gap_ms": 5001},
        {"format": "mp3", "gap_ms": True},
        {"format": "mp3", "chapter_gap_ms": 10001},
        {"format": "mp3", "loudness_lufs": -9},
        {"format": "mp3", "loudness_lufs": "loud"},
    ],
)
def test_render_options_are_validated(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord, body: Any
) -> None:
    job_id = finished_job(svc, admin, TONES[:1])
    response = client.post(f"/api/jobs/{job_id}/renders", json=body, headers=auth)
    assert response.status_code == 422, response.get_json()
    assert response.get_json()["error"]["code"] == "validation_error"


def test_second_render_of_a_job_is_refused_while_one_runs(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES[:2])
    other_job = finished_job(svc, admin, TONES[:1])
    gate = threading.Event()
    plain = svc.storage
    assert isinstance(plain, LocalStorage)
    svc.builders.storage = GatedStorage(plain.root, gate)
    try:
        first = start(client, auth, job_id, format="mp3")
        refused = client.post(f"/api/jobs/{job_id}/renders", json={"format": "m4b"}, headers=auth)
        assert refused.status_code == 409
        assert refused.get_json()["error"]["code"] == "render_in_progress"
        # The lock is per job: another job of the organization renders meanwhile.
        other = start(client, auth, other_job, format="mp3")
        for url in ("download", "captions.vtt", "captions.srt"):
            path = f"/api/jobs/{job_id}/renders/{first['id']}/{url}"
            assert fetch(client, path, auth)[0] == 404
    finally:
        gate.set()
    assert wait_ended(client, auth, job_id, first["id"])["status"] == "COMPLETED"
    assert wait_ended(client, auth, other_job, other["id"])["status"] == "COMPLETED"
    again = start(client, auth, job_id, format="m4b")
    assert wait_ended(client, auth, job_id, again["id"])["status"] == "COMPLETED"
    listed = client.get(f"/api/jobs/{job_id}/renders", headers=auth).get_json()["renders"]
    assert [r["id"] for r in listed] == [again["id"], first["id"]]


def test_renders_of_another_organization_are_not_found(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    from speechbatch.services import create_token
    from tests.helpers import new_admin

    job_id = finished_job(svc, admin, TONES[:1])
    done = wait_ended(client, auth, job_id, start(client, auth, job_id, format="mp3")["id"])
    stranger = new_admin(svc, "other", "admin@other.test")
    theirs = {"Authorization": f"Bearer {create_token(svc.uow_factory, stranger.email)}"}
    assert client.get(f"/api/jobs/{job_id}/renders", headers=theirs).status_code == 404
    assert client.get(done["download_url"], headers=theirs).status_code == 404
    posted = client.post(f"/api/jobs/{job_id}/renders", json={"format": "mp3"}, headers=theirs)
    assert posted.status_code == 404


@pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
def test_gc_counts_a_renders_files_as_referenced(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES[:1])
    done = wait_ended(client, auth, job_id, start(client, auth, job_id, format="mp3")["id"])
    assert done["status"] == "COMPLETED", done
    base = f"renders/{admin.organization_id}/job-{job_id}/render-{done['id']}"
    keys = {f"{base}.mp3", f"{base}.vtt", f"{base}.srt"}
    assert all(svc.storage.exists(key) for key in keys)
    with svc.uow_factory(read_only=True) as uow:
        assert uow.spending.referenced_keys([*keys, f"{base}.m4b"]) == keys
