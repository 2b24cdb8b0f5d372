"""Fixing one line: edits, selections, stale regenerates, takes, options, delete, search.

Every test runs on SQLite and PostgreSQL through the JSON API with the counting fake
provider: each fix bills exactly the items it touches (calls and characters, equal to
the ledger), and nothing else's audio changes (bytes compared).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from speechbatch import create_app
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.config import Settings
from speechbatch.services import create_token
from tests.conftest import close_services, services, with_settings
from tests.fakes import FakeProvider
from tests.helpers import assert_counters_match, view, wait_for
from tests.integration.test_spending import (
    audio_key,
    download,
    finished,
    job_of,
    other_admin,
    received_characters,
    usage,
)

TEXTS = ["First line.", "Second line.", "Third line."]


def api_job(client: FlaskClient, auth: dict[str, str], **body: Any) -> dict[str, Any]:
    body = {"title": "Edits", "voice": "alloy", "items": TEXTS, **body}
    response = client.post("/api/jobs", json=body, headers=auth)
    assert response.status_code == 201, response.get_json()
    job: dict[str, Any] = response.get_json()
    return job


def generate(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord, job_id: int,
    path: str = "generate", body: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    response = client.post(f"/api/jobs/{job_id}/{path}", json=body, headers=auth)
    assert response.status_code == 202, response.get_json()
    return finished(svc, admin, job_id)


def done_job(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord, **body: Any
) -> dict[str, Any]:
    job = api_job(client, auth, **body)
    return generate(svc, client, auth, admin, job["id"])


def audio_bytes(client: FlaskClient, auth: dict[str, str], job: dict[str, Any]) -> list[Any]:
    return [download(client, item["audio_url"], auth) for item in job["items"]]


def error_code(response: Any) -> str:
    return str(response.get_json()["error"]["code"])


def test_an_edit_bills_only_the_edited_item(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    job = done_job(svc, client, auth, admin)
    before = audio_bytes(client, auth, job)
    etag = client.get(f"/api/jobs/{job['id']}", headers=auth).headers["ETag"]
    item = job["items"][1]
    response = client.patch(
        f"/api/jobs/{job['id']}/items/{item['id']}", json={"text": "  Second line, fixed. "},
        headers=auth,
    )  # fmt: skip
    assert response.status_code == 200
    edited = view(svc, admin, job["id"])
    assert edited["status"] == "PENDING"
    assert edited["progress"]["stale"] == 1
    assert edited["items"][1]["status"] == "PENDING"
    assert edited["items"][1]["stale"] is True
    assert edited["items"][1]["text"] == "Second line, fixed."
    assert download(client, edited["items"][1]["audio_url"], auth) == before[1]  # kept
    assert client.get(f"/api/jobs/{job['id']}", headers=auth).headers["ETag"] != etag
    assert_counters_match(svc, job["id"])
    estimate = client.get(f"/api/jobs/{job['id']}/estimate", headers=auth).get_json()
    assert (estimate["items"], estimate["characters"]) == (1, len("Second line, fixed."))

    billed = received_characters(provider)
    again = generate(svc, client, auth, admin, job["id"])
    assert again["status"] == "COMPLETED"
    assert provider.calls["Second line, fixed."] == 1
    assert sum(provider.calls.values()) == 4
    assert received_characters(provider) == billed + len("Second line, fixed.")
    assert usage(svc, admin)["billed_characters"] == received_characters(provider)
    after = audio_bytes(client, auth, again)
    assert (after[0], after[2]) == (before[0], before[2])
    assert after[1] != before[1]
    assert again["items"][1]["stale"] is False
    assert again["progress"]["stale"] == 0


def test_an_edit_is_validated_and_refused_during_a_run(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    job = api_job(client, auth)
    url = f"/api/jobs/{job['id']}/items/{job['items'][0]['id']}"
    assert client.patch(url, json={"text": "   "}, headers=auth).status_code == 422
    assert client.patch(url, json={"text": "x" * 4097}, headers=auth).status_code == 422
    assert client.patch(url, json={"nope": 1}, headers=auth).status_code == 422
    other = job_of(svc, admin, ["Elsewhere"])
    foreign = view(svc, admin, other)["items"][0]["id"]
    missing = client.patch(
        f"/api/jobs/{job['id']}/items/{foreign}", json={"text": "a"}, headers=auth
    )
    assert missing.status_code == 404
    intruder = other_admin(svc)
    theirs = {"Authorization": f"Bearer {create_token(svc.uow_factory, intruder.email)}"}
    assert client.patch(url, json={"text": "mine"}, headers=theirs).status_code == 404

    provider.gate = threading.Event()
    try:
        assert client.post(f"/api/jobs/{job['id']}/generate", headers=auth).status_code == 202
        wait_for(lambda: provider.in_flight > 0)
        version = view(svc, admin, job["id"])
        refused = client.patch(url, json={"text": "during"}, headers=auth)
        assert refused.status_code == 409 and error_code(refused) == "already_generating"
        assert view(svc, admin, job["id"])["items"][0]["text"] == version["items"][0]["text"]
    finally:
        provider.gate.set()
    finished(svc, admin, job["id"])


def test_a_selection_regenerates_only_those_items(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    job = done_job(svc, client, auth, admin)
    before = audio_bytes(client, auth, job)
    ids = [item["id"] for item in job["items"]]
    keys = [audio_key(svc, admin, job["id"], i) for i in ids]
    estimate = client.get(
        f"/api/jobs/{job['id']}/estimate?items={ids[0]},{ids[2]}", headers=auth
    ).get_json()
    assert (estimate["items"], estimate["characters"]) == (2, len(TEXTS[0]) + len(TEXTS[2]))

    foreign = view(svc, admin, job_of(svc, admin, ["Not this job"]))["items"][0]["id"]
    refused = client.post(
        f"/api/jobs/{job['id']}/regenerate", json={"items": [ids[0], foreign]}, headers=auth
    )
    assert refused.status_code == 422
    unchanged = view(svc, admin, job["id"])
    assert unchanged["status"] == "COMPLETED" and len(unchanged["runs"]) == 1
    assert (
        client.get(f"/api/jobs/{job['id']}/estimate?items={foreign}", headers=auth).status_code
        == 422
    )
    bad: dict[str, Any]
    for bad in ({"items": []}, {"items": ["1"]}, {"items": [True]}, {"stale": "yes"},
                {"items": [2**70]}):  # fmt: skip
        response = client.post(f"/api/jobs/{job['id']}/regenerate", json=bad, headers=auth)
        assert response.status_code == 422, bad

    again = generate(svc, client, auth, admin, job["id"], "regenerate", {"items": [ids[0], ids[2]]})
    assert again["status"] == "COMPLETED"
    assert [provider.calls[t] for t in TEXTS] == [2, 1, 2]
    assert usage(svc, admin)["billed_characters"] == received_characters(provider)
    last = again["runs"][-1]
    assert (last["kind"], last["selected"]) == ("regenerate", 2)
    assert again["runs"][0]["selected"] is None
    after = audio_bytes(client, auth, again)
    assert after == before  # the fake provider says a text the same way every time
    new_keys = [audio_key(svc, admin, job["id"], i) for i in ids]
    assert new_keys[1] == keys[1]
    assert new_keys[0] != keys[0] and new_keys[2] != keys[2]
    assert_counters_match(svc, job["id"])


def test_a_voice_change_makes_items_stale_and_a_stale_regenerate_sends_them(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    job = done_job(svc, client, auth, admin)
    nothing = client.post(f"/api/jobs/{job['id']}/regenerate", json={"stale": True}, headers=auth)
    assert nothing.status_code == 409 and error_code(nothing) == "nothing_to_generate"
    assert (
        client.patch(f"/api/jobs/{job['id']}", json={"voice": "robot"}, headers=auth).status_code
        == 422
    )
    changed = client.patch(f"/api/jobs/{job['id']}", json={"voice": "echo"}, headers=auth)
    assert changed.status_code == 200
    stale = changed.get_json()
    assert stale["voice"] == "echo" and stale["status"] == "COMPLETED"
    assert stale["progress"]["stale"] == 3
    page = client.get(f"/api/jobs/{job['id']}/items?stale=1", headers=auth).get_json()
    assert page["total"] == 3 and all(item["stale"] for item in page["items"])
    estimate = client.get(f"/api/jobs/{job['id']}/estimate?stale=1", headers=auth).get_json()
    assert estimate["items"] == 3
    again = generate(svc, client, auth, admin, job["id"], "regenerate", {"stale": True})
    assert again["progress"]["stale"] == 0 and again["runs"][-1]["selected"] == 3
    assert sum(provider.calls.values()) == 6
    assert client.get(f"/api/jobs/{job['id']}/items?stale=1", headers=auth).get_json() == {
        "items": [],
        "total": 0,
    }


def test_a_stale_regenerate_bills_only_the_stale_items(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    job = done_job(svc, client, auth, admin)
    before = audio_bytes(client, auth, job)
    ids = [item["id"] for item in job["items"]]
    untouched_key = audio_key(svc, admin, job["id"], ids[1])
    fixed = {ids[0]: "First line, fixed.", ids[2]: "Third line, fixed."}
    for item_id, text in fixed.items():
        response = client.patch(
            f"/api/jobs/{job['id']}/items/{item_id}", json={"text": text}, headers=auth
        )
        assert response.status_code == 200
    estimate = client.get(f"/api/jobs/{job['id']}/estimate?stale=1", headers=auth).get_json()
    assert (estimate["items"], estimate["characters"]) == (2, sum(map(len, fixed.values())))

    billed = received_characters(provider)
    again = generate(svc, client, auth, admin, job["id"], "regenerate", {"stale": True})
    assert again["status"] == "COMPLETED" and again["progress"]["stale"] == 0
    assert (again["runs"][-1]["kind"], again["runs"][-1]["selected"]) == ("regenerate", 2)
    assert [provider.calls[t] for t in TEXTS] == [1, 1, 1]
    assert [provider.calls[t] for t in fixed.values()] == [1, 1]
    assert received_characters(provider) == billed + estimate["characters"]
    assert usage(svc, admin)["billed_characters"] == received_characters(provider)
    after = audio_bytes(client, auth, again)
    assert after[1] == before[1] and audio_key(svc, admin, job["id"], ids[1]) == untouched_key
    assert after[0] != before[0] and after[2] != before[2]
    assert_counters_match(svc, job["id"])


def test_options_are_stored_sent_and_part_of_the_fingerprint(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    bad = client.post(
        "/api/jobs", json={"title": "t", "voice": "alloy", "items": ["a"], "options": {"speed": 9}},
        headers=auth,
    )  # fmt: skip
    assert bad.status_code == 422
    plain = done_job(svc, client, auth, admin)
    assert plain["options"] == {}
    fast = done_job(svc, client, auth, admin, options={"speed": 1.5, "instructions": "Calm."})
    assert fast["options"] == {"speed": 1.5, "instructions": "Calm."}
    # Same texts, other options: nothing is reused, every call carries the options.
    assert all(not item["reused"] for item in fast["items"])
    assert provider.options_seen[-3:] == [{"speed": 1.5, "instructions": "Calm."}] * 3
    same = done_job(svc, client, auth, admin, options={"instructions": "Calm.", "speed": 1.5})
    assert all(item["reused"] for item in same["items"])
    changed = client.patch(
        f"/api/jobs/{plain['id']}", json={"options": {"speed": 2.0}}, headers=auth
    ).get_json()
    assert changed["options"] == {"speed": 2.0} and changed["progress"]["stale"] == 3


def test_takes_are_kept_restored_without_a_call_and_fall_off(
    app_keeping: AppKeeping, admin: UserRecord, provider: FakeProvider, auth: dict[str, str]
) -> None:
    svc, client = app_keeping(2)
    job = done_job(svc, client, auth, admin)
    item = job["items"][0]
    first_key = audio_key(svc, admin, job["id"], item["id"])
    first_audio = download(client, item["audio_url"], auth)
    url = f"/api/jobs/{job['id']}/items/{item['id']}"
    assert client.patch(url, json={"text": "First line, again."}, headers=auth).status_code == 200
    generate(svc, client, auth, admin, job["id"])
    takes = client.get(f"{url}/takes", headers=auth).get_json()["takes"]
    assert [(t["take"], t["text"], t["current"]) for t in takes] == [
        (2, "First line, again.", True),
        (1, "First line.", False),
    ]
    assert takes[1]["spoken_text"] == "First line." and takes[1]["voice"] == "alloy"
    assert download(client, takes[1]["audio_url"], auth) == first_audio

    calls = sum(provider.calls.values())
    restored = client.post(f"{url}/takes/1/restore", headers=auth)
    assert restored.status_code == 200
    now = restored.get_json()
    assert sum(provider.calls.values()) == calls
    assert now["items"][0]["text"] == "First line." and now["items"][0]["status"] == "DONE"
    assert now["items"][0]["stale"] is False and now["status"] == "COMPLETED"
    assert download(client, now["items"][0]["audio_url"], auth) == first_audio
    assert client.post(f"{url}/takes/9/restore", headers=auth).status_code == 404

    # A third take pushes take 1 off: its audio goes, as nothing else refers to it.
    generate(svc, client, auth, admin, job["id"], "regenerate", {"items": [item["id"]]})
    assert [t["take"] for t in client.get(f"{url}/takes", headers=auth).get_json()["takes"]] == [
        3,
        2,
    ]
    assert first_key is not None and not svc.storage.exists(first_key)
    assert client.post(f"{url}/takes/1/restore", headers=auth).status_code == 404
    assert client.get(f"{url}/takes/1/audio", headers=auth).status_code == 404


def test_a_take_that_falls_off_keeps_audio_another_item_shares(
    app_keeping: AppKeeping, admin: UserRecord, auth: dict[str, str]
) -> None:
    svc, client = app_keeping(1)
    job = done_job(svc, client, auth, admin)
    twin = done_job(svc, client, auth, admin)  # reuses every file of the first job
    assert all(item["reused"] for item in twin["items"])
    shared = audio_key(svc, admin, job["id"], job["items"][0]["id"])
    generate(svc, client, auth, admin, job["id"], "regenerate", {"items": [job["items"][0]["id"]]})
    assert shared is not None and svc.storage.exists(shared)
    assert download(client, twin["items"][0]["audio_url"], auth) is not None


def test_delete_removes_the_job_and_only_audio_nothing_else_refers_to(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    job = done_job(svc, client, auth, admin)
    other = api_job(client, auth, items=[TEXTS[0], "Only the second job."])
    other = generate(svc, client, auth, admin, other["id"])
    own_key = audio_key(svc, admin, job["id"], job["items"][1]["id"])
    shared_key = audio_key(svc, admin, job["id"], job["items"][0]["id"])
    assert client.delete(f"/api/jobs/{job['id']}", headers=auth).status_code == 204
    assert client.get(f"/api/jobs/{job['id']}", headers=auth).status_code == 404
    assert client.delete(f"/api/jobs/{job['id']}", headers=auth).status_code == 404
    assert own_key is not None and not svc.storage.exists(own_key)
    assert shared_key is not None and svc.storage.exists(shared_key)
    assert download(client, other["items"][0]["audio_url"], auth) is not None

    provider.gate = threading.Event()
    try:
        assert client.post(f"/api/jobs/{other['id']}/regenerate", headers=auth).status_code == 202
        refused = client.delete(f"/api/jobs/{other['id']}", headers=auth)
        assert refused.status_code == 409 and error_code(refused) == "already_generating"
    finally:
        provider.gate.set()
    finished(svc, admin, other["id"])


def test_the_job_list_searches_titles(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord
) -> None:
    for title in ("Station names", "Train announcements", "100% stations_", "Other"):
        api_job(client, auth, title=title)
    found = client.get("/api/jobs?q=STATION", headers=auth)
    assert [j["title"] for j in found.get_json()["jobs"]] == ["100% stations_", "Station names"]
    assert found.get_json()["total"] == 2
    assert client.get("/api/jobs?q=%25", headers=auth).get_json()["total"] == 1
    assert client.get("/api/jobs?q=_", headers=auth).get_json()["total"] == 1
    paged = client.get("/api/jobs?q=station&per_page=1&page=2", headers=auth).get_json()
    assert [j["title"] for j in paged["jobs"]] == ["Station names"]
    etag = found.headers["ETag"]
    assert (
        client.get("/api/jobs?q=train", headers={**auth, "If-None-Match": etag}).status_code == 200
    )
    again = client.get("/api/jobs?q=STATION", headers={**auth, "If-None-Match": etag})
    assert again.status_code == 304


AppKeeping = Callable[[int], tuple[Services, FlaskClient]]


@pytest.fixture
def app_keeping(settings: Settings, provider: FakeProvider) -> Iterator[AppKeeping]:
    """Another app on the test's database and provider that keeps ``n`` takes per item."""
    built: list[Services] = []

    def make(n: int) -> tuple[Services, FlaskClient]:
        app = create_app(with_settings(settings, takes_kept=n), provider=provider)
        app.config["TESTING"] = True
        built.append(services(app))
        return built[-1], app.test_client()

    yield make
    for svc in built:
        close_services(svc)
