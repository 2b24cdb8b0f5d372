"""Presets and the check report, on both databases, judged by decoding what was written
and measuring it here (scipy's oversampling for true peak, pyloudnorm for loudness,
plain sums for RMS and the noise floor), not by the app's own meters."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import mutagen.id3
import mutagen.mp3
import pyloudnorm
import pytest
from flask.testing import FlaskClient
from sqlalchemy import update

from speechbatch.adapters.models import Render
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from tests.helpers import concrete
from tests.integration.test_pages import sign_in
from tests.integration.test_renders import builders_end, fetch, start, wait_ended
from tests.support.render_audio import (
    Tone,
    decode_all,
    finished_job,
    mp3_frame_bit_rates,
    noise_floor_db,
    quiet_ends,
    rms_db,
    true_peak_db,
)

# Quiet speech with one short loud click: brought to a loudness target as a whole (the
# click is too short to weigh in it), the click went over full scale and was clipped
# before the limiter.
TONES = [
    Tone("Chapter one.", 1.5, 330, 0.1),
    Tone("A quiet line.", 2.0, 440, 0.08),
    Tone("A click.", 0.003, 1000, 0.9),
    Tone("Chapter two.", 1.2, 330, 0.1),
    Tone("The last quiet line.", 2.2, 550, 0.09),
]
CHAPTERS = [(1, "One: the start"), (4, "Two")]


def render(client: FlaskClient, auth: dict[str, str], job_id: int, **body: Any) -> Any:
    done = wait_ended(client, auth, job_id, start(client, auth, job_id, **body)["id"])
    assert done["status"] == "COMPLETED", done
    return done


def test_a_render_without_preset_never_clips(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES, chapters=CHAPTERS)
    done = render(client, auth, job_id, format="mp3", loudness_lufs=-14)
    samples, rate = decode_all(fetch(client, done["download_url"], auth)[2])
    assert true_peak_db(samples) <= -1.0
    check = done["check"]
    assert check["preset"] is None and check["true_peak_dbtp"] <= -1.0
    assert abs(check["true_peak_dbtp"] - true_peak_db(samples)) < 0.3
    assert abs(check["integrated_lufs"] - pyloudnorm.Meter(rate).integrated_loudness(samples)) < 0.2
    assert abs(check["rms_db"] - rms_db(samples)) < 0.1
    assert [c["title"] for c in check["chapters"]] == ["One: the start", "Two"]
    assert abs(sum(c["seconds"] for c in check["chapters"]) - len(samples) / rate) < 0.05


@pytest.mark.parametrize(
    ("preset", "fmt", "lufs", "tolerance"),
    [("podcast", "mp3", -16.0, 1.0), ("ebu", "m4b", -23.0, 0.5)],
)
def test_loudness_presets_meet_their_loudness_and_true_peak(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord,
    preset: str, fmt: str, lufs: float, tolerance: float,
) -> None:  # fmt: skip
    job_id = finished_job(svc, admin, TONES, chapters=CHAPTERS)
    done = render(client, auth, job_id, format=fmt, preset=preset)
    assert (done["preset"], done["chapter_files_url"]) == (preset, None)
    samples, rate = decode_all(fetch(client, done["download_url"], auth)[2])
    assert abs(pyloudnorm.Meter(rate).integrated_loudness(samples) - lufs) <= tolerance
    assert true_peak_db(samples) <= -1.0
    assert done["check"]["passed"] is True, done["check"]
    assert done["check"]["failures"] == []


def test_acx_makes_a_chapter_file_each_that_passes_its_rules(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES, chapters=CHAPTERS, title="A Book")
    done = render(client, auth, job_id, preset="acx")
    assert (done["format"], done["preset"]) == ("mp3", "acx")
    assert done["check"]["passed"] is True, done["check"]
    status, mimetype, archive = fetch(client, done["chapter_files_url"], auth)
    assert (status, mimetype) == (200, "application/zip")
    with zipfile.ZipFile(io.BytesIO(archive)) as files:
        names = files.namelist()
        assert names == ["01 One the start.mp3", "02 Two.mp3"]
        chapters = [files.read(name) for name in names]
    book = fetch(client, done["download_url"], auth)[2]
    reports = done["check"]["chapters"]
    for number, (data, reported) in enumerate(zip(chapters, reports, strict=True), 1):
        kbps, rates, frames = mp3_frame_bit_rates(data)
        assert (kbps, rates) == ({192}, {44100}) and frames > 100  # CBR: every frame
        info = mutagen.mp3.MP3(io.BytesIO(data)).info
        assert info is not None and info.bitrate_mode == mutagen.mp3.BitrateMode.CBR
        tags = mutagen.id3.ID3(io.BytesIO(data))
        assert (str(tags["TRCK"]), str(tags["TALB"])) == (f"{number}/2", "A Book")
        samples, rate = decode_all(data)
        assert rate == 44100
        assert -23.0 <= rms_db(samples) <= -18.0
        assert true_peak_db(samples) <= -3.0
        assert noise_floor_db(samples, rate) <= -60.0
        head, tail = quiet_ends(samples, rate)
        assert 0.5 <= head <= 1.0 and 1.0 <= tail <= 5.0, (head, tail)
        assert abs(reported["rms_db"] - rms_db(samples)) < 0.1
        assert abs(reported["seconds"] - len(samples) / rate) < 0.05
    assert mp3_frame_bit_rates(book)[:2] == ({192}, {44100})


@pytest.mark.parametrize(
    "body",
    [
        {"format": "mp3", "preset": "audible"},
        {"format": "m4b", "preset": "acx"},
        {"format": "mp3", "preset": "podcast", "loudness_lufs": -16},
        {"preset": None},
    ],
)
def test_a_preset_that_cannot_be_answers_422(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord, body: Any
) -> None:
    job_id = finished_job(svc, admin, TONES[:1])
    response = client.post(f"/api/jobs/{job_id}/renders", json=body, headers=auth)
    assert response.status_code == 422, response.get_json()
    assert response.get_json()["error"]["code"] == "validation_error"


__all__ = ["builders_end"]  # every render builder of a test ends before its app does


def test_the_page_form_starts_a_preset_and_the_list_says_what_fails_which_rule(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = finished_job(svc, admin, TONES, chapters=CHAPTERS)
    token = sign_in(client)
    form = {"csrf_token": token, "format": "mp3", "preset": "podcast", "loudness_lufs": "-18"}
    assert client.post(f"/jobs/{job_id}/renders", data=form).status_code == 302
    (render,) = client.get(f"/api/jobs/{job_id}/renders", headers=auth).get_json()["renders"]
    done = wait_ended(client, auth, job_id, render["id"])
    assert (done["preset"], done["check"]["passed"]) == ("podcast", True)
    page = client.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "✓ Passes Podcast" in page
    # A report with failures, as a render that broke its rules would have one.
    failing = done["check"] | {"passed": False, "failures": [
        "The whole file: true peak -0.5 dBTP is too high (at most -1 dBTP)",
        "The whole file: integrated loudness -19.2 LUFS is not within 1 LU of -16 LUFS",
    ]}  # fmt: skip
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(
            update(Render).where(Render.id == done["id"]).values(check_report=json.dumps(failing))
        )
        uow.commit()
    page = client.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "✗ 2 problems for Podcast" in page
    for failure in failing["failures"]:
        assert f"<li>{failure}</li>" in page
