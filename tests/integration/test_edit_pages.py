"""The job page's fixing controls, through the server-rendered forms: edit a line,
restore a take, regenerate a selection or the stale lines (estimate first), filter by
flag, delete the job. Every form posts its CSRF token; a post without one changes nothing."""

from __future__ import annotations

import re

from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from tests.fakes import FakeProvider
from tests.helpers import view
from tests.integration.test_pages import sign_in, text_of
from tests.integration.test_spending import finished, job_of, run


def test_edit_a_line_regenerate_it_and_restore_the_old_take(
    svc: Services, client: FlaskClient, admin: UserRecord, provider: FakeProvider
) -> None:
    csrf = sign_in(client)
    job_id = job_of(svc, admin, ["Good morning.", "Mind the gap."])
    run(svc, admin, job_id)
    item_id = view(svc, admin, job_id)["items"][1]["id"]
    page = text_of(client.get(f"/jobs/{job_id}"))
    assert f'href="/jobs/{job_id}/items/{item_id}"' in page
    assert 'id="btn-delete"' in page and 'id="selection-form"' in page

    item_url = f"/jobs/{job_id}/items/{item_id}"
    assert client.post(f"{item_url}/edit", data={"text": "Mind the step."}).status_code == 400
    assert view(svc, admin, job_id)["items"][1]["text"] == "Mind the gap."
    saved = client.post(f"{item_url}/edit", data={"text": "Mind the step.", "csrf_token": csrf})
    assert saved.status_code == 302
    job = view(svc, admin, job_id)
    assert job["items"][1]["stale"] and job["status"] == "PENDING"
    stale_page = text_of(client.get(f"/jobs/{job_id}?flag=stale"))
    assert "Mind the step." in stale_page and "Good morning." not in stale_page

    estimate = text_of(client.get(f"/jobs/{job_id}/selection?items={item_id}"))
    assert "Regenerate: 1 item, 14 characters" in estimate
    started = client.post(
        f"/jobs/{job_id}/selection", data={"items": str(item_id), "csrf_token": csrf}
    )
    assert started.status_code == 302
    job = finished(svc, admin, job_id)
    assert job["items"][1]["status"] == "DONE" and job["runs"][-1]["selected"] == 1
    assert provider.calls == {"Good morning.": 1, "Mind the gap.": 1, "Mind the step.": 1}

    takes_page = text_of(client.get(item_url))
    assert "Mind the gap." in takes_page and "Restore" in takes_page
    restore = re.search(rf'action="({item_url}/takes/1/restore)"', takes_page)
    assert restore is not None
    assert client.post(restore.group(1), data={"csrf_token": csrf}).status_code == 302
    job = view(svc, admin, job_id)
    assert job["items"][1]["text"] == "Mind the gap." and job["status"] == "COMPLETED"
    assert sum(provider.calls.values()) == 3


def test_regenerate_every_stale_line_from_the_page_and_delete_the_job(
    svc: Services, client: FlaskClient, admin: UserRecord, provider: FakeProvider
) -> None:
    csrf = sign_in(client)
    job_id = job_of(svc, admin, ["One.", "Two."])
    run(svc, admin, job_id)
    first = view(svc, admin, job_id)["items"][0]["id"]
    client.post(f"/jobs/{job_id}/items/{first}/edit", data={"text": "Uno.", "csrf_token": csrf})
    page = text_of(client.get(f"/jobs/{job_id}"))
    assert "Regenerate 1 stale line" in page
    assert "Regenerate: 1 item, 4 characters" in text_of(
        client.get(f"/jobs/{job_id}/selection?stale=1")
    )
    client.post(f"/jobs/{job_id}/selection", data={"stale": "1", "csrf_token": csrf})
    job = finished(svc, admin, job_id)
    assert job["progress"]["stale"] == 0 and provider.calls["Uno."] == 1

    assert client.post(f"/jobs/{job_id}/delete").status_code == 400
    gone = client.post(f"/jobs/{job_id}/delete", data={"csrf_token": csrf})
    assert gone.status_code == 302 and gone.headers["Location"].endswith("/")
    assert client.get(f"/jobs/{job_id}").status_code == 404
