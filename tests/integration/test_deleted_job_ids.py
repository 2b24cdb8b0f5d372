"""A deleted job's id, and what was cached under it.

SQLite gives a new row the largest id + 1, so deleting the newest job hands its id to the
next job created, in any organization; PostgreSQL's sequence never does. The per-process
document cache (``adapters/read/documents.py``) is keyed by (job id, variant) and trusts
the version alone: on SQLite the next job's poll was answered with the deleted job's JSON
(and its audio would have been written under the deleted job's keys, which audio shared
with other jobs can still be). New jobs on SQLite now start above every id a deleted job
had (``retired_ids``).
"""

from __future__ import annotations

from flask.testing import FlaskClient

from speechbatch.app import Services
from speechbatch.services import create_token
from tests.integration.test_spending import other_admin


def test_a_new_job_never_shows_a_deleted_jobs_document(
    svc: Services,
    client: FlaskClient,
    auth: dict[str, str],
) -> None:
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
