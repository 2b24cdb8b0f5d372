"""Every status code of the JSON API contract, and hostile input."""

from __future__ import annotations

import json

import pytest
from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import create_admin, create_token
from tests.fakes import FakeProvider
from tests.helpers import set_items, view, wait_for
from tests.integration.test_exports import sign_in


def _create(client: FlaskClient, auth: dict[str, str], n: int = 2, **extra: object):  # type: ignore[no-untyped-def]
    body: dict[str, object] = {
        "title": "  Greetings  ",
        "voice": "alloy",
        "items": [f" line {i} " for i in range(n)],
    }
    body.update(extra)
    return client.post("/api/jobs", json=body, headers=auth)


def _error(resp, status: int, code: str) -> None:  # type: ignore[no-untyped-def]
    assert resp.status_code == status, resp.get_data(as_text=True)
    body = resp.get_json()
    assert body["error"]["code"] == code
    assert body["error"]["message"]


def test_healthz(client: FlaskClient) -> None:
    resp = client.get("/healthz")
    assert resp.status_code == 200 and resp.get_json() == {"status": "ok"}


def test_create_job_trims_and_answers_201(client: FlaskClient, auth: dict[str, str]) -> None:
    resp = _create(client, auth)
    assert resp.status_code == 201
    job = resp.get_json()
    assert job["title"] == "Greetings"
    assert [i["text"] for i in job["items"]] == ["line 0", "line 1"]
    assert job["status"] == "PENDING" and job["attempt"] == 0
    assert job["progress"] == {
        "total": 2,
        "pending": 2,
        "generating": 0,
        "done": 0,
        "error": 0,
        "stale": 0,
        "suspect": 0,
    }
    assert job["created_at"].endswith("+00:00")
    assert job["runs"] == [] and job["started_at"] is None


def test_lists_newest_first_without_items(client: FlaskClient, auth: dict[str, str]) -> None:
    first = _create(client, auth).get_json()["id"]
    second = _create(client, auth).get_json()["id"]
    jobs = client.get("/api/jobs", headers=auth).get_json()["jobs"]
    assert [j["id"] for j in jobs] == [second, first]
    assert "items" not in jobs[0] and "progress" in jobs[0]


def test_generate_then_poll_until_completed(client: FlaskClient, auth: dict[str, str]) -> None:
    job_id = _create(client, auth, 3).get_json()["id"]
    resp = client.post(f"/api/jobs/{job_id}/generate", headers=auth)
    assert resp.status_code == 202
    assert resp.get_json()["status"] == "GENERATING" and resp.get_json()["attempt"] == 1
    job = wait_for(
        lambda: (
            (j := client.get(f"/api/jobs/{job_id}", headers=auth).get_json())["status"]
            == "COMPLETED"
            and j
        )
    )
    item = job["items"][0]
    assert item["audio_url"] == f"/api/jobs/{job_id}/items/{item['id']}/audio"
    audio = client.get(item["audio_url"], headers=auth)
    assert audio.status_code == 200 and audio.mimetype == "audio/mpeg" and audio.data
    audio.close()
    _error(client.post(f"/api/jobs/{job_id}/generate", headers=auth), 409, "nothing_to_generate")
    assert client.post(f"/api/jobs/{job_id}/regenerate", headers=auth).status_code == 202


def test_second_generate_is_409_already_generating(
    client: FlaskClient, auth: dict[str, str], provider: FakeProvider
) -> None:
    import threading

    provider.gate = threading.Event()
    job_id = _create(client, auth).get_json()["id"]
    assert client.post(f"/api/jobs/{job_id}/generate", headers=auth).status_code == 202
    _error(client.post(f"/api/jobs/{job_id}/generate", headers=auth), 409, "already_generating")
    _error(client.post(f"/api/jobs/{job_id}/regenerate", headers=auth), 409, "already_generating")
    provider.gate.set()


def test_voices(client: FlaskClient, auth: dict[str, str]) -> None:
    assert client.get("/api/voices", headers=auth).get_json() == {
        "voices": ["alloy", "echo"],
        "details": [
            {"name": "alloy", "provider": "fake", "label": "alloy", "language": ""},
            {"name": "echo", "provider": "fake", "label": "echo", "language": ""},
        ],
    }


@pytest.mark.parametrize(
    "path,method",
    [
        ("/api/jobs", "get"),
        ("/api/jobs", "post"),
        ("/api/jobs/1", "get"),
        ("/api/jobs/1/generate", "post"),
        ("/api/jobs/1/regenerate", "post"),
        ("/api/jobs/1/items/1/audio", "get"),
        ("/api/voices", "get"),
    ],
)
def test_unauthenticated_calls_are_401(client: FlaskClient, path: str, method: str) -> None:
    _error(getattr(client, method)(path), 401, "unauthorized")
    bad = {"Authorization": "Bearer not-a-token"}
    _error(getattr(client, method)(path, headers=bad), 401, "unauthorized")


def test_unknown_job_and_audio_are_404(client: FlaskClient, auth: dict[str, str]) -> None:
    _error(client.get("/api/jobs/999999", headers=auth), 404, "not_found")
    _error(client.post("/api/jobs/999999/generate", headers=auth), 404, "not_found")
    job = _create(client, auth).get_json()
    item = job["items"][0]["id"]
    _error(client.get(f"/api/jobs/{job['id']}/items/{item}/audio", headers=auth), 404, "not_found")
    _error(client.get("/api/nothing-here", headers=auth), 404, "not_found")


def test_other_organizations_job_is_404_like_a_missing_one(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    job_id = _create(client, auth).get_json()["id"]
    set_items(svc, job_id, status="DONE", audio_path="jobs/x.mp3")
    create_admin(svc.uow_factory, "other", "eve@other.test", "password-2")
    eve = {"Authorization": f"Bearer {create_token(svc.uow_factory, 'eve@other.test')}"}
    for call in (
        client.get(f"/api/jobs/{job_id}", headers=eve),
        client.post(f"/api/jobs/{job_id}/generate", headers=eve),
        client.post(f"/api/jobs/{job_id}/regenerate", headers=eve),
        client.get(f"/api/jobs/{job_id}/items/1/audio", headers=eve),
    ):
        _error(call, 404, "not_found")
    assert client.get("/api/jobs", headers=eve).get_json()["jobs"] == []
    assert view(svc, admin, job_id)["attempt"] == 0


def test_method_not_allowed_is_405(client: FlaskClient, auth: dict[str, str]) -> None:
    _error(client.delete("/api/jobs", headers=auth), 405, "method_not_allowed")


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"",
        b"\xff\xfe\x00garbage",
        b"[1, 2, 3]",
        b'"a string"',
        b"null",
    ],
)
def test_malformed_bodies_are_400(client: FlaskClient, auth: dict[str, str], body: bytes) -> None:
    resp = client.post("/api/jobs", data=body, headers={**auth, "Content-Type": "application/json"})
    _error(resp, 400, "bad_request")


@pytest.mark.parametrize(
    "changes",
    [
        {"title": ""},
        {"title": "   "},
        {"title": None},
        {"title": 42},
        {"title": "x" * 201},
        {"voice": "robot"},
        {"voice": None},
        {"items": []},
        {"items": "not a list"},
        {"items": [""]},
        {"items": ["ok", "   "]},
        {"items": ["x" * 4097]},
        {"items": [1, 2]},
        {"items": [{"txt": "an object without text"}]},
        {"items": ["ok"] * 5001},
        {"items": None},
        {"title": "nul\x00byte"},
        {"items": ["nul\x00byte"]},
    ],
)
def test_invalid_jobs_are_422_and_store_nothing(
    client: FlaskClient, auth: dict[str, str], changes: dict[str, object]
) -> None:
    body: dict[str, object] = {"title": "t", "voice": "alloy", "items": ["a"]}
    body.update(changes)
    _error(client.post("/api/jobs", json=body, headers=auth), 422, "validation_error")
    assert client.get("/api/jobs", headers=auth).get_json()["total"] == 0


def test_limits_are_inclusive(client: FlaskClient, auth: dict[str, str]) -> None:
    body = {"title": "t" * 200, "voice": "alloy", "items": ["x" * 4096] + ["y"] * 4999}
    resp = client.post("/api/jobs", json=body, headers=auth)
    assert resp.status_code == 201
    assert resp.get_json()["progress"]["total"] == 5000


def test_body_over_25_mib_is_413(client: FlaskClient, auth: dict[str, str]) -> None:
    data = json.dumps({"title": "t", "voice": "alloy", "items": ["x" * 1000] * 27000})
    resp = client.post("/api/jobs", data=data, headers={**auth, "Content-Type": "application/json"})
    _error(resp, 413, "payload_too_large")


def test_hostile_text_is_stored_verbatim(client: FlaskClient, auth: dict[str, str]) -> None:
    text = "<script>alert(1)</script> '; DROP TABLE jobs; -- \u202e 😀"
    resp = _create(client, auth, title=text, items=[text])
    assert resp.status_code == 201
    job = client.get(f"/api/jobs/{resp.get_json()['id']}", headers=auth).get_json()
    assert job["title"] == text.strip() and job["items"][0]["text"] == text.strip()


@pytest.mark.parametrize(
    "path", ["/api/jobs/abc", "/api/jobs/-1", "/api/jobs/99999999999999999999"]
)
def test_odd_ids_are_404(client: FlaskClient, auth: dict[str, str], path: str) -> None:
    _error(client.get(path, headers=auth), 404, "not_found")


def test_session_write_without_csrf_header_is_400(client: FlaskClient, admin: UserRecord) -> None:
    sign_in(client, admin)
    assert client.get("/api/jobs").status_code == 200  # GETs ride on the session
    resp = client.post("/api/jobs", json={"title": "t", "voice": "alloy", "items": ["a"]})
    _error(resp, 400, "bad_request")
    assert client.get("/api/jobs").get_json()["total"] == 0


def test_job_shows_its_lease(
    client: FlaskClient, auth: dict[str, str], provider: FakeProvider, svc: Services
) -> None:
    import threading
    from datetime import datetime

    provider.gate = threading.Event()
    job_id = _create(client, auth).get_json()["id"]
    client.post(f"/api/jobs/{job_id}/generate", headers=auth)
    lease = client.get(f"/api/jobs/{job_id}", headers=auth).get_json()["lease"]
    provider.gate.set()
    assert lease["worker"] and lease["reclaim_count"] == 0
    last = datetime.fromisoformat(lease["last_progress_at"])
    expires = datetime.fromisoformat(lease["expires_at"])
    assert (expires - last).total_seconds() == svc.settings.lease_seconds
    assert lease["worker_dead_seconds"] == svc.settings.worker_dead_seconds


def test_a_heartbeat_does_not_change_a_generating_jobs_answer(
    client: FlaskClient, auth: dict[str, str], provider: FakeProvider, svc: Services
) -> None:
    import threading

    from sqlalchemy import update

    from speechbatch.adapters.db import db_now
    from speechbatch.adapters.repositories.tables import workers

    provider.gate = threading.Event()
    job_id = _create(client, auth).get_json()["id"]
    client.post(f"/api/jobs/{job_id}/generate", headers=auth)
    try:
        # Until the run has sent what it can: both items' calls wait at the gate, so both
        # starts have committed and nothing moves. (Two equal reads 0.25 s apart were not
        # enough: a lane that started later than that changed the answer in between.)
        wait_for(lambda: provider.in_flight == 2)
        first = client.get(f"/api/jobs/{job_id}?items=none", headers=auth)
        with svc.engine.begin() as connection:
            connection.execute(update(workers).values(heartbeat_at=db_now()))
        again = client.get(
            f"/api/jobs/{job_id}?items=none",
            headers={**auth, "If-None-Match": first.headers["ETag"]},
        )
    finally:
        provider.gate.set()
    assert first.get_json()["status"] == "GENERATING"
    assert again.status_code == 304 and again.headers["ETag"] == first.headers["ETag"]


@pytest.mark.parametrize("path", ["/api/jobs/{id}", "/api/jobs/{id}/items?offset=115"])
def test_an_empty_if_none_match_answers_the_whole_document(
    client: FlaskClient, auth: dict[str, str], path: str
) -> None:
    job_id = _create(client, auth).get_json()["id"]
    response = client.get(path.format(id=job_id), headers={**auth, "If-None-Match": '""'})
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.headers["ETag"]


def test_metrics_count_claims_and_billed_calls(client: FlaskClient, auth: dict[str, str]) -> None:
    def sample(name: str) -> float:
        text = client.get("/metrics").get_data(as_text=True)
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and not line.startswith("#")
        )

    won, calls = (
        sample('speechbatch_claims_total{result="won"}'),
        sample('speechbatch_provider_calls_total{status="200"}'),
    )
    job_id = _create(client, auth, 3).get_json()["id"]
    client.post(f"/api/jobs/{job_id}/generate", headers=auth)
    wait_for(
        lambda: client.get(f"/api/jobs/{job_id}", headers=auth).get_json()["status"] == "COMPLETED"
    )
    client.post(f"/api/jobs/{job_id}/generate", headers=auth)  # refused: nothing to do
    assert sample('speechbatch_claims_total{result="won"}') == won + 1
    assert sample('speechbatch_provider_calls_total{status="200"}') == calls + 3
    assert sample('speechbatch_claims_total{result="refused"}') >= 1
    assert client.get("/metrics").mimetype == "text/plain"
