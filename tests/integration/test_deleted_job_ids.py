"""A deleted job's id, and what was cached under it.

SQLite gives a new row the largest id + 1, so deleting the newest job hands its id to the
next job created, in any organization; PostgreSQL's sequence never does. The per-process
document cache (``adapters/read/documents.py``) is keyed by (job id, variant) and trusts
the version alone ("jobs are never deleted, so an id never names another job"): on SQLite
the next job's poll is then answered with the deleted job's JSON. Marked xfail on SQLite
until job ids are never reused there (``sqlite_autoincrement``) or the cache checks the
job's identity; it passes on PostgreSQL.
"""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from speechbatch.app import Services
from speechbatch.services import create_token
from tests.integration.test_spending import other_admin


def test_a_new_job_never_shows_a_deleted_jobs_document(
    request: pytest.FixtureRequest,
    backend: str,
    svc: Services,
    client: FlaskClient,
    auth: dict[str, str],
) -> None:
    if backend == "sqlite":
        request.applymarker(
            pytest.mark.xfail(strict=True, reason="SQLite reuses a deleted newest job's id")
        )
    body = {"title": "Acme's private job", "voice": "alloy", "items": ["Acme only."]}
    mine = client.post("/api/jobs", json=body, headers=auth).get_json()
    assert client.get(f"/api/jobs/{mine['id']}", headers=auth).status_code == 200  # cached
    assert client.delete(f"/api/jobs/{mine['id']}", headers=auth).status_code == 204

    intruder = other_admin(svc)
    theirs = {"Authorization": f"Bearer {create_token(svc.uow_factory, intruder.email)}"}
    body = {"title": "Globex job", "voice": "alloy", "items": ["Globex text."]}
    created = client.post("/api/jobs", json=body, headers=theirs).get_json()
    read = client.get(f"/api/jobs/{created['id']}", headers=theirs).get_json()
    assert (read["title"], read["items"][0]["text"]) == ("Globex job", "Globex text.")
