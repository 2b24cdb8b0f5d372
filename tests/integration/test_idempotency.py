"""``Idempotency-Key`` on the four creating calls, on both databases: a repeat by the same
organization answers the first answer and creates nothing more (also when it races the
first), another body with the same key is a 422, and a key whose request died is
answered from what it created, or taken over when it created nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import delete, func, select, update

from speechbatch.adapters.db import ago
from speechbatch.adapters.models import Export, IdempotencyKey, Job, Render
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.errors import IdempotencyKeyTaken
from speechbatch.runner.export_builder import wait_for_exports
from speechbatch.runner.render_builder import wait_for_renders
from speechbatch.services import create_job, create_token
from speechbatch.web.openapi.idempotency import CREATING_CALLS
from tests.helpers import LIMITS, concrete, new_admin
from tests.support.render_audio import Tone, finished_job

JOB = {"title": "Retried", "voice": "alloy", "items": ["one", "two"]}
THREADS = 8


def keyed(auth: dict[str, str], key: str) -> dict[str, str]:
    return {**auth, "Idempotency-Key": key}


def count(svc: Services, model: Any) -> int:
    with concrete(svc.uow_factory)(read_only=True) as uow:
        return int(uow.session.execute(select(func.count()).select_from(model)).scalar_one())


def multipart(boundary: str, text: bytes) -> tuple[bytes, str]:
    """An import's multipart body (a Markdown file and its voice) with ``boundary``."""
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="voice"\r\n\r\nalloy\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.md"\r\n'
            "Content-Type: text/markdown\r\n\r\n"
        ).encode()
        + text
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


@pytest.fixture(autouse=True)
def builders_end(app: Flask) -> Iterator[None]:
    """Every render and export builder ends before the app and its database go away."""
    yield
    assert wait_for_renders(30) and wait_for_exports(30)


def test_a_repeated_creation_answers_the_first_answer_and_creates_nothing_more(
    svc: Services, client: FlaskClient, auth: dict[str, str]
) -> None:
    first = client.post("/api/jobs", json=JOB, headers=keyed(auth, "retry-1"))
    again = client.post("/api/jobs", json=JOB, headers=keyed(auth, "retry-1"))
    assert first.status_code == again.status_code == 201
    assert again.get_data() == first.get_data()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert count(svc, Job) == 1


def test_the_same_key_with_another_body_answers_422_and_creates_nothing(
    svc: Services, client: FlaskClient, auth: dict[str, str]
) -> None:
    client.post("/api/jobs", json=JOB, headers=keyed(auth, "retry-2"))
    other = client.post("/api/jobs", json={**JOB, "title": "Other"}, headers=keyed(auth, "retry-2"))
    assert other.status_code == 422
    assert other.get_json()["error"]["code"] == "idempotency_key_reused"
    assert count(svc, Job) == 1


def test_json_spacing_and_key_order_do_not_make_another_request(
    svc: Services, client: FlaskClient, auth: dict[str, str]
) -> None:
    compact = '{"title":"Retried","voice":"alloy","items":["one","two"]}'
    spaced = '{ "items": ["one", "two"],\n  "voice": "alloy", "title": "Retried" }'
    headers = {**keyed(auth, "retry-3"), "Content-Type": "application/json"}
    first = client.post("/api/jobs", data=compact, headers=headers)
    again = client.post("/api/jobs", data=spaced, headers=headers)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.get_json()["id"] == first.get_json()["id"]
    assert count(svc, Job) == 1


def test_keys_belong_to_an_organization(
    svc: Services, client: FlaskClient, auth: dict[str, str]
) -> None:
    other = new_admin(svc, "globex", "admin@globex.test")
    other_auth = {"Authorization": f"Bearer {create_token(svc.uow_factory, other.email)}"}
    ours = client.post("/api/jobs", json=JOB, headers=keyed(auth, "shared"))
    theirs = client.post("/api/jobs", json=JOB, headers=keyed(other_auth, "shared"))
    assert (ours.status_code, theirs.status_code) == (201, 201)
    assert ours.get_json()["id"] != theirs.get_json()["id"]


def test_a_call_that_failed_gives_its_key_back(
    svc: Services, client: FlaskClient, auth: dict[str, str]
) -> None:
    refused = client.post("/api/jobs", json={**JOB, "voice": "nobody"}, headers=keyed(auth, "k"))
    fixed = client.post("/api/jobs", json=JOB, headers=keyed(auth, "k"))
    assert refused.status_code == 422
    assert refused.get_json()["error"]["code"] == "validation_error"
    assert fixed.status_code == 201
    assert count(svc, Job) == 1


def test_an_import_repeated_with_another_multipart_boundary_creates_once(
    svc: Services, client: FlaskClient, auth: dict[str, str]
) -> None:
    text = b"# One\n\nFirst paragraph.\n\n# Two\n\nSecond paragraph.\n"
    answers = []
    for boundary in ("boundary-a1", "other-boundary-b2"):
        body, content_type = multipart(boundary, text)
        headers = {**keyed(auth, "import-1"), "Content-Type": content_type}
        answers.append(client.post("/api/jobs/import", data=body, headers=headers))
    changed, content_type = multipart("boundary-c3", text + b"\nMore.\n")
    headers = {**keyed(auth, "import-1"), "Content-Type": content_type}
    reused = client.post("/api/jobs/import", data=changed, headers=headers)
    assert [a.status_code for a in answers] == [201, 201]
    assert answers[1].get_data() == answers[0].get_data()
    assert reused.status_code == 422
    assert count(svc, Job) == 1


def test_a_repeated_render_answers_the_first_render(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str]
) -> None:
    job_id = finished_job(svc, admin, [Tone("A line.", 0.4, 440, 0.1)])
    url = f"/api/jobs/{job_id}/renders"
    first = client.post(url, json={"format": "mp3"}, headers=keyed(auth, "render-1"))
    again = client.post(url, json={"format": "mp3"}, headers=keyed(auth, "render-1"))
    assert first.status_code == again.status_code == 202
    assert again.get_data() == first.get_data()
    assert count(svc, Render) == 1


def test_a_repeated_export_answers_the_first_export_not_a_conflict(
    svc: Services, client: FlaskClient, auth: dict[str, str]
) -> None:
    first = client.post("/api/exports", headers=keyed(auth, "export-1"))
    again = client.post("/api/exports", headers=keyed(auth, "export-1"))
    assert first.status_code == again.status_code == 202
    assert again.get_data() == first.get_data()
    assert count(svc, Export) == 1


def test_concurrent_repeats_create_exactly_one_job(
    app: Flask, svc: Services, auth: dict[str, str]
) -> None:
    """Real threads behind a barrier, each its own client: one creates, every other one
    waits for its answer (or finds it), and all of them answer the same job."""
    barrier = threading.Barrier(THREADS)
    answers: list[Any] = [None] * THREADS

    def post(n: int) -> None:
        client = app.test_client()
        barrier.wait()
        answers[n] = client.post("/api/jobs", json=JOB, headers=keyed(auth, "race"))

    threads = [threading.Thread(target=post, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [a.status_code for a in answers] == [201] * THREADS
    assert len({a.get_json()["id"] for a in answers}) == 1
    assert sum("Idempotent-Replayed" not in a.headers for a in answers) == 1
    assert count(svc, Job) == 1


def _rows(svc: Services, **values: Any) -> None:
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(update(IdempotencyKey).values(**values))
        uow.commit()


def test_a_first_request_that_died_after_creating_is_answered_from_what_it_created(
    svc: Services, client: FlaskClient, auth: dict[str, str]
) -> None:
    first = client.post("/api/jobs", json=JOB, headers=keyed(auth, "died"))
    # As if its process died between the creating commit and the recorded answer.
    _rows(svc, status_code=None, body=None, locked_until=ago(1))
    again = client.post("/api/jobs", json=JOB, headers=keyed(auth, "died"))
    assert again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["id"] == first.get_json()["id"]
    assert count(svc, Job) == 1


def test_a_key_whose_request_died_before_creating_is_taken_over_after_its_lease(
    svc: Services, client: FlaskClient, auth: dict[str, str]
) -> None:
    client.post("/api/jobs", json=JOB, headers=keyed(auth, "lost"))
    # As if its process died before the creating commit: nothing created, nothing answered.
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(delete(Job))
        uow.commit()
    _rows(svc, resource=None, status_code=None, body=None, locked_until=ago(1))
    again = client.post("/api/jobs", json=JOB, headers=keyed(auth, "lost"))
    assert again.status_code == 201
    assert "Idempotent-Replayed" not in again.headers
    assert count(svc, Job) == 1


def test_a_holder_whose_key_was_taken_over_creates_nothing(
    svc: Services, admin: UserRecord
) -> None:
    """A slow first request (past its lease) loses its key to a repeat: its creating
    transaction rolls back, so only the repeat's job exists."""
    with svc.uow_factory() as uow:
        slow = uow.idempotency.claim_key(
            admin.organization_id, "slow", "fp", ttl_seconds=60, lease_seconds=-1
        )
        uow.commit()
    with svc.uow_factory() as uow:
        repeat = uow.idempotency.claim_key(
            admin.organization_id, "slow", "fp", ttl_seconds=60, lease_seconds=60
        )
        uow.commit()
    assert slow is not None and repeat is not None and repeat.claim == slow.claim + 1
    create_job(svc.uow_factory, admin, "t", "alloy", ["x"], LIMITS, idempotency=repeat)
    with pytest.raises(IdempotencyKeyTaken):
        create_job(svc.uow_factory, admin, "t", "alloy", ["x"], LIMITS, idempotency=slow)
    assert count(svc, Job) == 1


def test_expired_keys_are_swept_by_a_later_claim(
    svc: Services, client: FlaskClient, auth: dict[str, str]
) -> None:
    client.post("/api/jobs", json=JOB, headers=keyed(auth, "old"))
    _rows(svc, expires_at=ago(1))
    other = client.post("/api/jobs", json={**JOB, "title": "New"}, headers=keyed(auth, "new"))
    reused = client.post("/api/jobs", json={**JOB, "title": "Again"}, headers=keyed(auth, "old"))
    assert (other.status_code, reused.status_code) == (201, 201)
    assert count(svc, IdempotencyKey) == 2  # "old" swept by "new", then claimed anew
    assert count(svc, Job) == 3


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9"], ids=["empty", "long", "latin"])
def test_a_malformed_key_is_a_400(client: FlaskClient, auth: dict[str, str], key: str) -> None:
    answer = client.post(
        "/api/jobs", json=JOB, headers={**auth, "Idempotency-Key": key.encode().decode("latin-1")}
    )
    assert answer.status_code == 400
    assert "Idempotency-Key" in answer.get_json()["error"]["message"]


def test_the_openapi_document_describes_the_header_on_the_four_creating_calls(
    client: FlaskClient,
) -> None:
    document = client.get("/api/openapi.json").get_json()
    reference = {"$ref": "#/components/parameters/IdempotencyKey"}
    described = [
        reference in document["paths"][path][method]["parameters"]
        for path, method in CREATING_CALLS
    ]
    assert described == [True] * 4
    parameter = document["components"]["parameters"]["IdempotencyKey"]
    assert (parameter["name"], parameter["in"]) == ("Idempotency-Key", "header")
