"""A cast on several providers, on SQLite and PostgreSQL: a narrator on Piper and two
characters on two paid providers (their local stand-ins) in one job. Each line is gated,
paced, reserved and billed by its own voice's provider: each stand-in receives exactly
its character's lines, the ledger bills each provider exactly what it received, a slow
provider holds none of another's slots (nor its lanes), and the render's captions are
timed by word where the provider gave word timing."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from speechbatch.adapters.providers import build_provider
from speechbatch.config import Settings
from speechbatch.provider_settings import PaidProviders as PaidSettings
from speechbatch.provider_settings import ProviderLimit
from speechbatch.runner.render_builder import wait_for_renders
from speechbatch.services import create_token
from tests.conftest import app_for_tests, services
from tests.helpers import new_admin, wait_for
from tests.integration.test_renders import fetch, start, wait_ended
from tests.support.paid_providers import KEY, SECONDS_PER_CHARACTER, PaidProviders, ssml_text
from tests.support.render_audio import parse_cues

NARRATOR = "piper:en_US-joe-medium"
ALICE = "elevenlabs:21m00Tcm4TlvDq8rCL9Xx"  # ElevenLabs: characters, timed by character
BOB = "google:en-US-Neural2-C"  # Google: bytes, timed by its marks
# Longer than one cue (two lines of 42): its captions are cut inside it, at a word.
LONG = (
    "I waited for you at the station all evening long, and the rain never stopped, "
    "not even once, until the last train had gone."
)
LINES: list[Any] = [
    "It was a dark night.",
    {"text": LONG, "speaker": "Alice"},
    {"text": "Café au lait, Alice?", "speaker": "Bob"},
    "She nodded.",
    {"text": "Yes, please.", "speaker": "Alice"},
    {"text": "Crème brûlée too.", "speaker": "Bob"},
]
ALICES = [LONG, "Yes, please."]
BOBS = ["Café au lait, Alice?", "Crème brûlée too."]
NARRATION = ["It was a dark night.", "She nodded."]


@pytest.fixture
def server() -> Iterator[PaidProviders]:
    """The local paid providers."""
    s = PaidProviders().start()
    yield s
    s.stop()


@pytest.fixture
def mixed_app(settings: Settings, server: PaidProviders) -> Iterator[Flask]:
    """Piper (in this process) as the default provider, ElevenLabs with one slot and
    Google with two, beside it."""
    paid = PaidSettings(
        elevenlabs_api_key=KEY, elevenlabs_base_url=server.url,
        google_api_key=KEY, google_base_url=server.url,
    )  # fmt: skip
    mixed = replace(
        settings, tts_provider="piper", tts_providers=("piper", "elevenlabs", "google"),
        piper_processes=0, paid=paid, provider_concurrency=8, tts_timeout_seconds=5.0,
        provider_limits={"elevenlabs": ProviderLimit(concurrency=1),
                         "google": ProviderLimit(concurrency=2)},
    ).validate()  # fmt: skip
    yield from app_for_tests(mixed, build_provider(mixed))
    assert wait_for_renders(30), "a render builder was still running"


def _generate(app: Flask, items: list[Any]) -> tuple[FlaskClient, dict[str, str], int]:
    """A new admin's job of ``items`` (narrated by NARRATOR, Alice and Bob cast), its
    generation started: (client, auth, job id)."""
    svc = services(app)
    admin = new_admin(svc, "acme", "admin@acme.test")
    auth = {"Authorization": f"Bearer {create_token(svc.uow_factory, admin.email)}"}
    client = app.test_client()
    body = {"title": "Cast", "voice": NARRATOR, "items": items,
            "cast": {"Alice": ALICE, "Bob": BOB}}  # fmt: skip
    created = client.post("/api/jobs", json=body, headers=auth)
    assert created.status_code == 201, created.get_json()
    job_id = created.get_json()["id"]
    assert client.post(f"/api/jobs/{job_id}/generate", headers=auth).status_code == 202
    return client, auth, job_id


def _job(client: FlaskClient, auth: dict[str, str], job_id: int) -> Any:
    return client.get(f"/api/jobs/{job_id}", headers=auth).get_json()


def _finished(client: FlaskClient, auth: dict[str, str], job_id: int) -> Any:
    return wait_for(
        lambda: (j := _job(client, auth, job_id))["status"] != "GENERATING" and j, timeout=60
    )


def _received(server: PaidProviders) -> tuple[list[str], list[str]]:
    """The texts each stand-in was asked to speak: (ElevenLabs', Google's)."""
    eleven = [r.json()["text"] for r in server.speech_requests() if "with-timestamps" in r.path]
    google = [
        ssml_text(r.json()["input"]["ssml"].encode())
        for r in server.speech_requests()
        if r.path.endswith("text:synthesize")
    ]
    return eleven, google


def test_each_line_is_sent_and_billed_by_its_own_voices_provider(
    mixed_app: Flask, server: PaidProviders
) -> None:
    client, auth, job_id = _generate(mixed_app, LINES)
    job = _finished(client, auth, job_id)
    assert job["status"] == "COMPLETED", job
    assert [i["status"] for i in job["items"]] == ["DONE"] * len(LINES)
    eleven, google = _received(server)
    assert Counter(eleven) == Counter(ALICES) and Counter(google) == Counter(BOBS)
    usage = client.get("/api/usage", headers=auth).get_json()
    billed = {p["provider"]: (p["billed"], p["calls"]) for p in usage["providers"]}
    assert billed == {
        "piper": (sum(map(len, NARRATION)), len(NARRATION)),
        "elevenlabs": (sum(map(len, eleven)), len(eleven)),  # characters
        "google": (sum(len(t.encode()) for t in google), len(google)),  # bytes
    }
    assert usage["billed_characters"] == sum(b for b, _ in billed.values())
    assert usage["in_doubt_calls"] == 0


def test_captions_are_timed_by_word_where_the_provider_gave_word_timing(
    mixed_app: Flask, server: PaidProviders
) -> None:
    client, auth, job_id = _generate(mixed_app, LINES)
    job = _finished(client, auth, job_id)
    assert job["status"] == "COMPLETED", job
    for item in job["items"]:
        if item["text"] in ALICES + BOBS:
            timing = client.get(
                f"/api/jobs/{job_id}/items/{item['id']}/timing", headers=auth
            ).get_json()
            assert timing["level"] == "word", (item["text"], timing)
            words = timing["words"]
            assert " ".join(w["text"] for w in words) == item["text"]
            # The stand-ins' clock: a word starts 50 ms per character before it.
            at = [m.start() * SECONDS_PER_CHARACTER for m in re.finditer(r"\S+", item["text"])]
            assert [w["start_seconds"] for w in words] == pytest.approx(at, abs=0.002)
    render = wait_ended(client, auth, job_id, start(client, auth, job_id, format="mp3")["id"])
    assert render["status"] == "COMPLETED", render
    cues = parse_cues(fetch(client, render["captions"]["srt"], auth)[2].decode())
    texts = [text.replace("\n", " ") for _, _, text in cues]
    first = next(n for n, t in enumerate(texts) if LONG.startswith(t))
    long_cues = cues[first : first + 2]
    assert " ".join(t.replace("\n", " ") for _, _, t in long_cues) == LONG
    # The second cue of the long line starts at its first word, by ElevenLabs' timing.
    second = long_cues[1][2].replace("\n", " ")
    offset = LONG.index(second) * SECONDS_PER_CHARACTER
    assert long_cues[1][0] - long_cues[0][0] == pytest.approx(offset, abs=0.002)


def test_a_slow_provider_holds_none_of_anothers_slots(
    mixed_app: Flask, server: PaidProviders
) -> None:
    # ElevenLabs (one slot) takes 2 s a call; Google (two slots) 0.2 s. Alice's lines come
    # first: were they gated as the narrator's provider, or queued before Bob's on the
    # same threads, Bob's would wait behind them.
    server.latencies = {"with-timestamps": 2.0, "text:synthesize": 0.2}
    alices = [f"Alice says {n}." for n in range(3)]
    bobs = [f"Bob says {n}." for n in range(6)]
    items: list[Any] = [{"text": t, "speaker": "Alice"} for t in alices]
    items += [{"text": t, "speaker": "Bob"} for t in bobs] + ["The end."]
    client, auth, job_id = _generate(mixed_app, items)

    def bobs_done() -> Any:
        job = _job(client, auth, job_id)
        done = [i["text"] for i in job["items"] if i["status"] == "DONE"]
        return all(t in done for t in bobs) and done

    done = wait_for(bobs_done, timeout=30)
    assert sum(t in done for t in alices) < len(alices)  # ElevenLabs is still at it
    job = _finished(client, auth, job_id)
    assert job["status"] == "COMPLETED", job
    assert server.most_in_flight == {"with-timestamps": 1, "text:synthesize": 2}
    eleven, google = _received(server)
    assert Counter(eleven) == Counter(alices) and Counter(google) == Counter(bobs)
