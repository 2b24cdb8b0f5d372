"""A cast of voices on SQLite and PostgreSQL: items with a speaker, a job's cast set at
creation and changed by PATCH, each line spoken (and fingerprinted, and recorded in its
take) with its speaker's voice, and a change of one speaker's voice that makes exactly
that speaker's DONE lines stale and quotes exactly them."""

from __future__ import annotations

import csv
import io
import zipfile
from typing import Any

import pytest
from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import parse_items_csv
from tests.fakes import FakeProvider
from tests.integration.test_edits import api_job, generate
from tests.integration.test_exports import download, start, wait_ended
from tests.integration.test_lexicon import SQL, passes_done, put
from tests.integration.test_pages import sign_in, text_of
from tests.integration.test_spending import usage

# Alice has a voice of her own; Bob is not in the cast (the narrator's voice, alloy).
LINES: list[Any] = [
    "Once upon a time.",
    {"text": "Hello there.", "speaker": " Alice "},
    {"text": "Hi, Alice.", "speaker": "Bob", "key": "bob-1"},
    {"text": "Same words.", "speaker": "Alice"},
    "Same words.",
]
CAST = {"Alice": "echo"}


def cast_job(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord
) -> dict[str, Any]:
    """A DONE job of LINES with CAST."""
    job = api_job(client, auth, items=LINES, cast=CAST)
    return generate(svc, client, auth, admin, job["id"])


def patch(client: FlaskClient, auth: dict[str, str], job_id: int, body: dict[str, Any]) -> Any:
    return client.patch(f"/api/jobs/{job_id}", json=body, headers=auth)


def stale_texts(job: dict[str, Any]) -> list[tuple[str | None, str]]:
    return [(item["speaker"], item["text"]) for item in job["items"] if item["stale"]]


def test_items_carry_a_trimmed_speaker(client: FlaskClient, auth: dict[str, str]) -> None:
    job = api_job(client, auth, items=LINES)
    assert [(i["speaker"], i["key"]) for i in job["items"]] == [
        (None, None), ("Alice", None), ("Bob", "bob-1"), ("Alice", None), (None, None),
    ]  # fmt: skip
    page = client.get(f"/api/jobs/{job['id']}/items?limit=2", headers=auth).get_json()
    assert [i["speaker"] for i in page["items"]] == [None, "Alice"]
    assert job["cast"] == {}


@pytest.mark.parametrize(
    ("speaker", "fragment"),
    [
        ("", "visible character"),
        ("  \u200b ", "visible character"),
        ("x" * 51, "at most 50"),
        (5, "a name"),
        (None, "a name"),
        ("a\x00b", "NUL"),
    ],
)
def test_bad_speakers_answer_422(
    client: FlaskClient, auth: dict[str, str], speaker: Any, fragment: str
) -> None:
    body = {"title": "t", "voice": "alloy", "items": [{"text": "a", "speaker": speaker}]}
    response = client.post("/api/jobs", json=body, headers=auth)
    assert response.status_code == 422, response.get_json()
    assert fragment in response.get_json()["error"]["message"]


def test_a_cast_is_set_at_creation_and_read_back(client: FlaskClient, auth: dict[str, str]) -> None:
    job = api_job(client, auth, items=LINES, cast={" Alice ": "echo", "Zoe": "alloy"})
    assert job["cast"] == {"Alice": "echo", "Zoe": "alloy"}
    listed = client.get("/api/jobs", headers=auth).get_json()["jobs"]
    assert listed[0]["cast"] == {"Alice": "echo", "Zoe": "alloy"}


@pytest.mark.parametrize(
    "cast",
    [["Alice"], {"Alice": "robot"}, {"Alice": None}, {"": "echo"}, {"Alice": 5},
     {"Alice": "echo", " Alice": "alloy"}, {f"s{n}": "echo" for n in range(101)}],
)  # fmt: skip
def test_bad_casts_answer_422_and_create_nothing(
    client: FlaskClient, auth: dict[str, str], cast: Any
) -> None:
    body = {"title": "t", "voice": "alloy", "items": ["a"], "cast": cast}
    response = client.post("/api/jobs", json=body, headers=auth)
    assert response.status_code == 422, response.get_json()
    assert response.get_json()["error"]["code"] == "validation_error"
    assert client.get("/api/jobs", headers=auth).get_json()["total"] == 0


def test_each_line_is_spoken_with_its_speakers_voice(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    job = cast_job(svc, client, auth, admin)
    assert job["status"] == "COMPLETED"
    # "Same words." is asked twice, in two voices: two calls, no reuse across voices.
    assert sorted(provider.voices_seen) == [
        ("Hello there.", "echo"), ("Hi, Alice.", "alloy"), ("Once upon a time.", "alloy"),
        ("Same words.", "alloy"), ("Same words.", "echo"),
    ]  # fmt: skip
    assert [item["reused"] for item in job["items"]] == [False] * 5
    voices = []
    for item in job["items"]:
        takes = client.get(f"/api/jobs/{job['id']}/items/{item['id']}/takes", headers=auth)
        voices.append(takes.get_json()["takes"][0]["voice"])
    assert voices == ["alloy", "echo", "alloy", "echo", "alloy"]


def test_a_speakers_line_reuses_audio_only_of_the_same_voice(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    cast_job(svc, client, auth, admin)
    again = api_job(client, auth, items=[{"text": "Hello there.", "speaker": "Carol"}],
                    cast={"Carol": "echo"})  # fmt: skip
    done = generate(svc, client, auth, admin, again["id"])
    assert done["items"][0]["reused"] is True
    assert provider.calls["Hello there."] == 1


def test_changing_one_speakers_voice_makes_exactly_their_lines_stale_and_quotes_them(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    job = cast_job(svc, client, auth, admin)
    etag = client.get(f"/api/jobs/{job['id']}", headers=auth).headers["ETag"]
    assert patch(client, auth, job["id"], {"cast": {"Alice": "robot"}}).status_code == 422
    changed = patch(client, auth, job["id"], {"cast": {"Alice": "alloy"}})
    assert changed.status_code == 200, changed.get_json()
    now = changed.get_json()
    assert now["cast"] == {"Alice": "alloy"} and now["status"] == "COMPLETED"
    assert stale_texts(now) == [("Alice", "Hello there."), ("Alice", "Same words.")]
    assert now["progress"]["stale"] == 2
    assert client.get(f"/api/jobs/{job['id']}", headers=auth).headers["ETag"] != etag
    estimate = client.get(f"/api/jobs/{job['id']}/estimate?stale=1", headers=auth).get_json()
    assert (estimate["items"], estimate["characters"]) == (2, len("Hello there.Same words."))

    before = len(provider.voices_seen)
    again = generate(svc, client, auth, admin, job["id"], "regenerate", {"stale": True})
    assert again["progress"]["stale"] == 0 and again["runs"][-1]["selected"] == 2
    assert sorted(provider.voices_seen[before:]) == [
        ("Hello there.", "alloy"), ("Same words.", "alloy"),
    ]  # fmt: skip
    assert usage(svc, admin)["billed_characters"] == sum(
        len(text) for text, _voice in provider.voices_seen
    )


def test_a_cast_change_merges_and_null_gives_a_speaker_back_to_the_narrator(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
) -> None:  # fmt: skip
    job = cast_job(svc, client, auth, admin)
    same = patch(client, auth, job["id"], {"cast": {"Alice": "echo", "Bob": "alloy"}})
    # Bob joins the cast with the voice he already had: nothing is stale.
    assert same.get_json()["cast"] == {"Alice": "echo", "Bob": "alloy"}
    assert same.get_json()["progress"]["stale"] == 0
    bob = patch(client, auth, job["id"], {"cast": {"Bob": "echo"}}).get_json()
    assert bob["cast"] == {"Alice": "echo", "Bob": "echo"}
    assert stale_texts(bob) == [("Bob", "Hi, Alice.")]
    alice = patch(client, auth, job["id"], {"cast": {"Alice": None}}).get_json()
    assert alice["cast"] == {"Bob": "echo"}
    assert [s for s, _t in stale_texts(alice)] == ["Alice", "Bob", "Alice"]


def test_the_stale_pass_judges_a_speakers_line_by_its_speakers_voice(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
) -> None:  # fmt: skip
    job = cast_job(svc, client, auth, admin)
    # A rule that changes none of these lines: its pass judges every DONE line again.
    assert put(client, auth, [SQL]).status_code == 200
    passes_done(svc, admin)
    after = client.get(f"/api/jobs/{job['id']}", headers=auth).get_json()
    assert after["progress"]["stale"] == 0
    patch(client, auth, job["id"], {"cast": {"Alice": "alloy"}})
    assert put(client, auth, [SQL, {"match": "nothing", "say": "here"}]).status_code == 200
    passes_done(svc, admin)
    again = client.get(f"/api/jobs/{job['id']}", headers=auth).get_json()
    assert stale_texts(again) == [("Alice", "Hello there."), ("Alice", "Same words.")]


def test_a_csv_speaker_column_gives_each_line_its_speaker(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    content = "key,speaker,text\nk1,Alice,Hello there.\n,,Once upon a time.\n,Bob,Hi.\n"
    entries = parse_items_csv(content)
    assert entries == [
        {"text": "Hello there.", "key": "k1", "speaker": "Alice"}, "Once upon a time.",
        {"text": "Hi.", "speaker": "Bob"},
    ]  # fmt: skip
    job = api_job(client, auth, items=entries)
    assert [i["speaker"] for i in job["items"]] == ["Alice", None, "Bob"]


def test_the_job_page_shows_the_cast_and_changes_one_speakers_voice(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    job = cast_job(svc, client, auth, admin)
    csrf = sign_in(client)
    page = text_of(client.get(f"/jobs/{job['id']}"))
    assert 'id="cast"' in page and 'data-speaker="Alice"' in page and 'data-speaker="Bob"' in page
    assert '<span class="item-speaker">Alice</span>' in page
    form = f"/jobs/{job['id']}/cast"
    body = {"speaker": "Bob", "voice": "echo", "csrf_token": csrf}
    assert client.post(form, data={**body, "csrf_token": ""}).status_code == 400
    refused = client.post(form, data={**body, "voice": "robot"}, follow_redirects=True)
    assert 'class="flash flash-error"' in text_of(refused)
    assert client.get(f"/api/jobs/{job['id']}", headers=auth).get_json()["cast"] == CAST

    saved = client.post(form, data=body, follow_redirects=True)
    assert "Bob&#39;s voice saved" in text_of(saved) or "Bob's voice saved" in text_of(saved)
    now = client.get(f"/api/jobs/{job['id']}", headers=auth).get_json()
    assert now["cast"] == {"Alice": "echo", "Bob": "echo"}
    assert stale_texts(now) == [("Bob", "Hi, Alice.")]
    back = client.post(form, data={**body, "voice": ""}, follow_redirects=True)
    assert back.status_code == 200
    assert client.get(f"/api/jobs/{job['id']}", headers=auth).get_json()["cast"] == CAST
    item_page = text_of(client.get(f"/jobs/{job['id']}/items/{job['items'][1]['id']}"))
    assert 'id="item-speaker"' in item_page and "<strong>Alice</strong>" in item_page
    assert sum(provider.calls.values()) == 5


def test_a_new_narrator_voice_leaves_the_casts_lines_and_new_options_touch_every_line(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
) -> None:  # fmt: skip
    job = cast_job(svc, client, auth, admin)
    narrated = patch(client, auth, job["id"], {"voice": "echo"}).get_json()
    assert stale_texts(narrated) == [
        (None, "Once upon a time."), ("Bob", "Hi, Alice."), (None, "Same words."),
    ]  # fmt: skip
    estimate = client.get(f"/api/jobs/{job['id']}/estimate?stale=1", headers=auth).get_json()
    assert estimate["items"] == 3
    slower = patch(client, auth, job["id"], {"options": {"speed": 1.5}}).get_json()
    assert slower["progress"]["stale"] == 5


def test_the_export_manifest_names_the_voice_each_file_was_spoken_with(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
) -> None:  # fmt: skip
    cast_job(svc, client, auth, admin)
    done = wait_ended(client, auth, start(client, auth)["id"])
    archive = zipfile.ZipFile(io.BytesIO(download(client, done["download_url"], auth)[2]))
    manifest = list(csv.DictReader(io.StringIO(archive.read("manifest.csv").decode())))
    assert [row["voice"] for row in manifest] == ["alloy", "echo", "alloy", "echo", "alloy"]
