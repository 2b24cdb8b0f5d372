"""Timing for every take: espeak's measured from its audio (English words by forced
alignment, other languages by sentence), Piper's by word too, or its own sentences; the API's
``GET …/items/ITEM/timing`` answers the current take's, on both databases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from speechbatch.adapters.providers.base import timing_of
from speechbatch.adapters.providers.espeak import EspeakProvider
from speechbatch.adapters.providers.piper import PiperProvider
from speechbatch.app import Services
from speechbatch.config import Settings
from speechbatch.runner.measure import time_take
from speechbatch.services import create_token
from tests.conftest import app_for_tests, services
from tests.helpers import new_admin
from tests.integration.test_spending import finished

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Please mind the gap. The next stop is Central Station, where you can change trains.",
]


@pytest.fixture(scope="module")
def piper() -> PiperProvider:
    return PiperProvider()


@pytest.fixture
def espeak_app(settings: Settings) -> Iterator[Flask]:
    yield from app_for_tests(settings, EspeakProvider())


@pytest.fixture
def piper_app(settings: Settings, piper: PiperProvider) -> Iterator[Flask]:
    yield from app_for_tests(settings, piper)


def done_job(app: Flask, voice: str, texts: list[str]) -> tuple[FlaskClient, dict[str, str], Any]:
    """A new admin's job of ``texts`` in ``voice``, generated: (client, auth, the job)."""
    svc: Services = services(app)
    admin = new_admin(svc, "acme", "admin@acme.test")
    auth = {"Authorization": f"Bearer {create_token(svc.uow_factory, admin.email)}"}
    client = app.test_client()
    created = client.post(
        "/api/jobs", json={"title": "Timed", "voice": voice, "items": texts}, headers=auth
    )
    assert created.status_code == 201, created.get_json()
    job_id = created.get_json()["id"]
    assert client.post(f"/api/jobs/{job_id}/generate", headers=auth).status_code == 202
    job = finished(svc, admin, job_id)
    assert job["status"] == "COMPLETED", job
    return client, auth, job


def _timing(client: FlaskClient, auth: dict[str, str], job: Any, item: Any) -> Any:
    response = client.get(f"/api/jobs/{job['id']}/items/{item['id']}/timing", headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def _in_order(spans: list[dict[str, Any]], duration: float) -> None:
    starts = [s["start_seconds"] for s in spans]
    assert starts == sorted(starts)
    for span in spans:
        assert 0 <= span["start_seconds"] <= span["end_seconds"] <= duration + 0.05


def test_an_espeak_job_in_english_has_word_timing(espeak_app: Flask) -> None:
    client, auth, job = done_job(espeak_app, "en-us", TEXTS)
    for item, text in zip(job["items"], TEXTS, strict=True):
        timing = _timing(client, auth, job, item)
        assert timing["level"] == "word"
        assert [w["text"] for w in timing["words"]] == text.split()
        assert " ".join(s["text"] for s in timing["sentences"]) == text
        _in_order(timing["words"], item["duration_seconds"])
        _in_order(timing["sentences"], item["duration_seconds"])
    two = _timing(client, auth, job, job["items"][1])["sentences"]
    assert [s["text"] for s in two] == ["Please mind the gap.", TEXTS[1][21:]]
    # The second sentence starts after the first one's pause, not at the item's start.
    assert two[1]["start_seconds"] > two[0]["end_seconds"] > 0.5


def test_an_espeak_job_in_german_has_sentence_timing(espeak_app: Flask) -> None:
    text = "Guten Morgen, liebe Freunde. Heute lesen wir ein kurzes Kapitel zusammen."
    client, auth, job = done_job(espeak_app, "de", [text])
    timing = _timing(client, auth, job, job["items"][0])
    assert timing["level"] == "sentence" and timing["words"] is None
    first, second = timing["sentences"]
    assert [first["text"], second["text"]] == ["Guten Morgen, liebe Freunde.", text[29:]]
    assert second["start_seconds"] - first["end_seconds"] > 0.1  # the pause between them
    _in_order(timing["sentences"], job["items"][0]["duration_seconds"])


def test_a_piper_job_in_english_is_timed_by_word(piper_app: Flask) -> None:
    client, auth, job = done_job(piper_app, "en_US-joe-medium", TEXTS[1:])
    timing = _timing(client, auth, job, job["items"][0])
    assert timing["level"] == "word"
    assert [w["text"] for w in timing["words"]] == TEXTS[1].split()
    assert [s["text"] for s in timing["sentences"]] == ["Please mind the gap.", TEXTS[1][21:]]
    _in_order(timing["words"], job["items"][0]["duration_seconds"])


def test_piper_gives_the_words_it_spoke_one_for_one(piper: PiperProvider) -> None:
    given = timing_of(piper.synthesize(TEXTS[0], "en_US-joe-medium"))
    assert given is not None and [w["text"] for w in given] == TEXTS[0].split()
    _in_order(list(given), 5.0)


def test_piper_times_the_words_it_says_as_one_by_word(piper: PiperProvider) -> None:
    # espeak-ng says "in the", "of the" and "had to" as one word each.
    text = "He had to wait in the cold station, one of the coldest of all."
    given = timing_of(piper.synthesize(text, "en_US-joe-medium"))
    assert given is not None and [w["text"] for w in given] == text.split()
    _in_order(list(given), 6.0)
    joined = [w for w in given if w["text"] in ("had", "to", "in", "the")]
    assert all(w["end_seconds"] > w["start_seconds"] for w in joined)


def test_pipers_own_sentences_are_kept_where_words_cannot_be_aligned(piper: PiperProvider) -> None:
    # A number is spoken as several words: Piper's words are not the text's.
    text = "Please mind the gap. The next train leaves at 9."
    audio = piper.synthesize(text, "en_US-joe-medium")
    given = timing_of(audio)
    assert given is not None and [s["text"] for s in given] == [
        "Please mind the gap.",
        text[21:],
    ]
    first, second = given
    # Piper's pause between its sentences, and a start inside the audio.
    assert 0 < first["start_seconds"] < first["end_seconds"] < second["start_seconds"]
    stored = time_take(bytes(audio), text, "de_DE-thorsten-medium", given)
    assert stored is not None and json.loads(stored) == {
        "level": "sentence", "sentences": list(given), "words": None,
    }  # fmt: skip


def test_timing_is_404_for_an_item_without_a_take_or_of_another_organization(
    espeak_app: Flask,
) -> None:
    svc: Services = services(espeak_app)
    client, auth, job = done_job(espeak_app, "en-us", TEXTS[:1])
    other = new_admin(svc, "other", "admin@other.test")
    other_auth = {"Authorization": f"Bearer {create_token(svc.uow_factory, other.email)}"}
    url = f"/api/jobs/{job['id']}/items/{job['items'][0]['id']}/timing"
    assert client.get(url, headers=other_auth).status_code == 404
    pending = client.post(
        "/api/jobs", json={"title": "Not yet", "voice": "en-us", "items": ["Hi."]}, headers=auth
    ).get_json()
    response = client.get(
        f"/api/jobs/{pending['id']}/items/{pending['items'][0]['id']}/timing", headers=auth
    )
    assert response.status_code == 404
    assert response.get_json()["error"]["code"]


def test_an_item_that_shares_anothers_audio_has_its_timing(espeak_app: Flask) -> None:
    client, auth, job = done_job(espeak_app, "en-us", [TEXTS[0], TEXTS[0]])
    takes = client.get(
        f"/api/jobs/{job['id']}/items/{job['items'][1]['id']}/takes", headers=auth
    ).get_json()["takes"]
    assert takes[0]["reused"] is True  # its take was recorded without timing of its own
    first, second = (_timing(client, auth, job, item) for item in job["items"])
    assert first["level"] == "word" and second == first
