"""Paragraph pauses, heard: an item of two paragraphs renders with ``paragraph_gap_ms`` of
silence between them (measured in the decoded render), its captions move with it, and an
item without a paragraph break renders as before; on both databases.

Each item is two tones with 250 ms of silence between them (the voice's own pause), and
its take is timed by sentence, one tone a sentence, as a provider's timing would say.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import insert, select

from speechbatch.adapters.models import Item, Render, Take
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.domain.timing import Span, Timing
from speechbatch.runner.render_builder import wait_for_renders
from tests.helpers import concrete
from tests.integration.test_pages import sign_in
from tests.integration.test_renders import fetch, start, wait_ended
from tests.support.render_audio import (
    RATE,
    Samples,
    Tone,
    decode_all,
    encode_mp3,
    finished_job,
    parse_cues,
    tone_samples,
)

FIRST, PAUSE, SECOND = Tone("", 1.0, 440, 0.2), 0.25, Tone("", 1.2, 550, 0.2)
PARAGRAPHS = "The first paragraph ends here.\n\nThe second one starts."
ONE_PARAGRAPH = "The first sentence ends here. The second one starts."


@pytest.fixture(autouse=True)
def builders_end(app: Flask) -> Iterator[None]:
    yield
    assert wait_for_renders(30), "a render builder was still running"


def _two_sentence_job(svc: Services, admin: UserRecord, texts: list[str]) -> int:
    """A finished job whose items each speak two sentences (two tones, a pause between),
    each with a take timed by sentence."""
    job_id = finished_job(svc, admin, [Tone(t, 0.1) for t in texts])
    audio = np.concatenate(
        [tone_samples(FIRST), np.zeros(int(PAUSE * RATE), np.float32), tone_samples(SECOND)]
    )
    second_start = FIRST.seconds + PAUSE
    with concrete(svc.uow_factory)() as uow:
        items = uow.session.execute(
            select(Item.id, Item.position, Item.text, Item.audio_path).where(Item.job_id == job_id)
        ).all()
        for item in items:
            svc.storage.write(item.audio_path, encode_mp3(audio))
            first, second = item.text.replace("\n\n", " ").split(". ")
            timing = Timing(
                (
                    Span(first + ".", 0.0, FIRST.seconds),
                    Span(second, second_start, second_start + SECOND.seconds),
                )
            )
            uow.session.execute(
                insert(Take).values(
                    item_id=item.id, take=1, text=item.text, spoken_text=item.text,
                    voice="alloy", audio_path=item.audio_path,
                    timing=json.dumps(timing.as_json()),
                )
            )  # fmt: skip
        uow.commit()
    return job_id


def silences_in(samples: Samples, rate: int) -> list[float]:
    """The length of every silence (5 ms windows quieter than -40 dBFS) between sounds."""
    window = rate // 200
    frames = len(samples) // window
    rms = np.sqrt(np.mean(np.square(samples[: frames * window].reshape(frames, window)), axis=1))
    loud = np.flatnonzero(rms > 0.01)
    runs = np.diff(loud) - 1
    return [round(float(r) * window / rate, 3) for r in runs if r > 0]


def _render(client: FlaskClient, auth: dict[str, str], job_id: int, **body: object) -> dict:
    done = wait_ended(client, auth, job_id, start(client, auth, job_id, **body)["id"])
    assert done["status"] == "COMPLETED", done
    return dict(done)


def test_a_paragraph_break_is_rendered_as_the_paragraph_gap(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = _two_sentence_job(svc, admin, [PARAGRAPHS, ONE_PARAGRAPH])
    done = _render(client, auth, job_id, format="mp3", gap_ms=400, paragraph_gap_ms=900)
    samples, rate = decode_all(fetch(client, done["download_url"], auth)[2])
    silences = silences_in(samples, rate)
    print(f"silences with paragraph_gap_ms=900, gap_ms=400: {silences}")
    # Between the paragraphs; between the items; inside the item of one paragraph.
    assert len(silences) == 3, silences
    for found, wanted in zip(silences, [0.9, 0.4, PAUSE], strict=True):
        assert abs(found - wanted) < 0.03, silences
    item = FIRST.seconds + SECOND.seconds
    assert abs(done["duration_seconds"] - (item + 0.9 + 0.4 + item + PAUSE)) < 0.01
    # The captions moved with the audio: the second paragraph's cue starts with its tone.
    cues = parse_cues(fetch(client, done["captions"]["srt"], auth)[2].decode())
    assert [c[2] for c in cues] == [
        "The first paragraph ends here.", "The second one starts.",
        "The first sentence ends here.", "The second one starts.",
    ]  # fmt: skip
    second_paragraph = FIRST.seconds + 0.9
    assert abs(cues[1][0] - second_paragraph) < 0.01, cues
    assert abs(cues[3][0] - (item + 0.9 + 0.4 + FIRST.seconds + PAUSE)) < 0.01, cues


def test_the_paragraph_gap_is_700_ms_unless_asked_and_can_be_none(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = _two_sentence_job(svc, admin, [PARAGRAPHS])
    for body, wanted in (({}, [0.7]), ({"paragraph_gap_ms": 0}, [])):
        done = _render(client, auth, job_id, format="m4b", **body)
        samples, rate = decode_all(fetch(client, done["download_url"], auth)[2])
        silences = silences_in(samples, rate)
        print(f"silences with {body or 'the default'}: {silences}")
        assert len(silences) == len(wanted), silences
        for found, gap in zip(silences, wanted, strict=True):
            assert abs(found - gap) < 0.03, silences


@pytest.mark.parametrize("value", [-1, 5001, True, 1.5, "700", None])
def test_a_bad_paragraph_gap_is_refused(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord, value: object
) -> None:
    job_id = finished_job(svc, admin, [Tone("One.", 0.2)])
    response = client.post(
        f"/api/jobs/{job_id}/renders",
        json={"format": "mp3", "paragraph_gap_ms": value},
        headers=auth,
    )
    assert response.status_code == 422, response.get_json()
    error = response.get_json()["error"]
    assert error["code"] == "validation_error"
    assert "paragraph_gap_ms" in error["message"], error


def test_the_job_pages_render_form_asks_for_the_paragraph_gap(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = _two_sentence_job(svc, admin, [PARAGRAPHS])
    token = sign_in(client)
    page = client.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert 'name="paragraph_gap_ms" value="700"' in page
    form = {"csrf_token": token, "format": "mp3", "paragraph_gap_ms": "1000", "gap_ms": "400"}
    assert client.post(f"/jobs/{job_id}/renders", data=form).status_code == 302
    (render,) = client.get(f"/api/jobs/{job_id}/renders", headers=auth).get_json()["renders"]
    done = wait_ended(client, auth, job_id, render["id"])
    assert done["status"] == "COMPLETED", done
    with concrete(svc.uow_factory)() as uow:
        stored = uow.session.execute(
            select(Render.paragraph_gap_ms).where(Render.id == done["id"])
        ).scalar_one()
    assert stored == 1000
    samples, rate = decode_all(fetch(client, done["download_url"], auth)[2])
    (silence,) = silences_in(samples, rate)
    assert abs(silence - 1.0) < 0.03, silence


def test_the_openapi_document_describes_the_paragraph_gap(client: FlaskClient) -> None:
    document = client.get("/api/openapi.json").get_json()
    request = document["components"]["schemas"]["RenderRequest"]["properties"]
    assert request["paragraph_gap_ms"] == {"type": "integer", "minimum": 0, "maximum": 5000}
