"""The job page's fixing controls, through the server-rendered forms: edit a line,
restore a take, regenerate a selection or the stale lines (estimate first), filter by
flag, delete the job. Every form posts its CSRF token; a post without one changes nothing."""

from __future__ import annotations

import re
import threading

from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import Selection, start_generation
from tests.fakes import FakeProvider
from tests.helpers import view, wait_for
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


def test_the_job_page_changes_voice_and_options_and_refuses_during_a_run(
    svc: Services, client: FlaskClient, admin: UserRecord, provider: FakeProvider
) -> None:
    csrf = sign_in(client)
    job_id = job_of(svc, admin, ["One.", "Two."])
    run(svc, admin, job_id)
    page = text_of(client.get(f"/jobs/{job_id}"))
    assert 'id="settings-form"' in page and '<option value="echo">echo</option>' in page
    assert "Saving a change makes 2 done lines stale" in page
    settings = f"/jobs/{job_id}/settings"
    body = {"voice": "echo", "speed": "1.5", "instructions": " Calm. ", "csrf_token": csrf}

    assert client.post(settings, data={**body, "csrf_token": ""}).status_code == 400
    for bad in ({"voice": "robot"}, {"speed": "fast"}, {"speed": "9"}, {"speed": "nan"}):
        refused = client.post(settings, data={**body, **bad}, follow_redirects=True)
        assert refused.status_code == 200 and 'class="flash flash-error"' in text_of(refused)
    unchanged = view(svc, admin, job_id)
    assert (unchanged["voice"], unchanged["options"], unchanged["progress"]["stale"]) == (
        "alloy", {}, 0,
    )  # fmt: skip

    saved = client.post(settings, data=body, follow_redirects=True)
    assert "Voice and options saved" in text_of(saved)
    job = view(svc, admin, job_id)
    assert job["voice"] == "echo" and job["options"] == {"speed": 1.5, "instructions": "Calm."}
    assert job["progress"]["stale"] == 2 and sum(provider.calls.values()) == 2
    page = text_of(saved)
    assert '<option value="echo" selected>' in page and 'value="1.5"' in page
    assert ">Calm.</textarea>" in page
    again = client.post(settings, data=body, follow_redirects=True)
    assert "Nothing changed" in text_of(again)

    provider.gate = threading.Event()
    try:
        start_generation(
            svc.uow_factory, svc.settings, svc.runner, admin, job_id, selection=Selection(None)
        )
        wait_for(lambda: provider.in_flight > 0)
        during = client.post(settings, data={**body, "voice": "alloy"}, follow_redirects=True)
        assert "the job is generating" in text_of(during)
        assert view(svc, admin, job_id)["voice"] == "echo"
    finally:
        provider.gate.set()
    job = finished(svc, admin, job_id)
    assert job["progress"]["stale"] == 0 and provider.options_seen[-1] == {
        "speed": 1.5,
        "instructions": "Calm.",
    }
