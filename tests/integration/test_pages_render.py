"""Every admin page renders for a person: no program internals, no field marked invalid on a
form nobody has sent yet (the Flask test client, on SQLite and PostgreSQL)."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from flask.testing import FlaskClient

from speechbatch.adapters.models import Item
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from tests.fakes import FakeProvider, permanent
from tests.helpers import ago, claim, new_job, set_items, set_job, view, wait_for
from tests.integration.test_pages import csrf_from, sign_in, text_of

# What a page must never show a person: a Python repr, a method, a stack trace.
INTERNALS = ("object at 0x", "built-in method", "bound method", "Traceback")


def assert_readable(page: str, where: str) -> None:
    """The page shows no program internals."""
    shown = [word for word in INTERNALS if word in page]
    assert not shown, f"{where} shows {shown}"


def assert_nothing_invalid(page: str, where: str) -> None:
    """No field is marked invalid and no field error is visible."""
    assert "aria-invalid" not in page, where
    visible_errors = re.findall(r'<p class="field-error"(?! [^>]*hidden)[^>]*>', page)
    assert not visible_errors, f"{where}: {visible_errors}"


def finished_job(svc: Services, admin: UserRecord, client: FlaskClient, token: str, n: int) -> int:
    """A job whose first run has ended (COMPLETED, or FAILED when an item failed)."""
    job_id = new_job(svc, admin, n=n, title=f"job of {n}")
    assert client.post(f"/jobs/{job_id}/generate", data={"csrf_token": token}).status_code == 302
    wait_for(lambda: view(svc, admin, job_id)["status"] in ("COMPLETED", "FAILED"))
    return job_id


def jobs_in_every_state(
    svc: Services, admin: UserRecord, client: FlaskClient, token: str, provider: FakeProvider
) -> dict[str, int]:
    """A job of the admin in each state a job page shows, by name."""
    jobs = {"pending": new_job(svc, admin, n=2, title="pending")}
    jobs["completed"] = finished_job(svc, admin, client, token, 3)
    provider.fail_texts["text 2"] = permanent()
    jobs["failed"] = finished_job(svc, admin, client, token, 2)
    jobs["generating"] = new_job(svc, admin, n=2, title="generating")
    assert claim(svc, admin, jobs["generating"]) == 1
    jobs["cancelled"] = new_job(svc, admin, n=2, title="cancelled")
    claim(svc, admin, jobs["cancelled"])
    client.post(f"/jobs/{jobs['cancelled']}/cancel", data={"csrf_token": token})
    jobs["interrupted"] = new_job(svc, admin, n=2, title="interrupted")
    claim(svc, admin, jobs["interrupted"])
    with svc.uow_factory() as uow:
        assert uow.runs.interrupt_run(jobs["interrupted"], 1, "interrupted: the server stopped")
        uow.commit()
    jobs["recovered"] = new_job(svc, admin, n=3, title="recovered")
    claim(svc, admin, jobs["recovered"])
    set_items(svc, jobs["recovered"], Item.position == 1, status="DONE")
    set_items(svc, jobs["recovered"], updated_at=ago(3600))
    set_job(svc, jobs["recovered"], updated_at=ago(3600), started_at=ago(3600))
    return jobs


def test_no_page_shows_internals_or_a_field_marked_invalid(
    app: Flask, client: FlaskClient, svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    pages = {"login": text_of(client.get("/login"))}
    token = sign_in(client)
    pages["jobs, none yet"] = text_of(client.get("/"))
    jobs = jobs_in_every_state(svc, admin, client, token, provider)
    states = {view(svc, admin, job_id)["status"] for job_id in jobs.values()}
    assert states == {"PENDING", "GENERATING", "COMPLETED", "FAILED"}
    paths = {
        "jobs": "/",
        "jobs, filtered": "/?status=FAILED",
        "new job": "/jobs/new",
        **{f"job {state}": f"/jobs/{job_id}" for state, job_id in jobs.items()},
        "job items, filtered": f"/jobs/{jobs['failed']}?status=ERROR",
        "job items, past the end": f"/jobs/{jobs['completed']}?page=9",
        "tokens": "/tokens",
        "usage": "/usage",
        "exports": "/exports",
        "not found": "/no/such/page",
    }
    for name, path in paths.items():
        response = client.get(path)
        assert response.status_code == (404 if name == "not found" else 200), name
        pages[name] = text_of(response)
    created = client.post("/tokens", data={"name": "script", "csrf_token": token})
    pages["token created"] = text_of(created)
    for name, page in pages.items():
        assert_readable(page, name)
        assert_nothing_invalid(page, name)


def test_the_new_job_form_marks_only_the_field_in_error(
    client: FlaskClient, admin: UserRecord
) -> None:
    token = sign_in(client)
    fresh = text_of(client.get("/jobs/new"))
    assert_readable(fresh, "new job")
    assert_nothing_invalid(fresh, "new job")
    response = client.post("/jobs", data={"title": "t", "voice": "alloy", "csrf_token": token})
    assert response.status_code == 422
    page = text_of(response)
    assert_readable(page, "new job, sent empty")
    assert re.findall(r'id="(\w+)"[^>]*aria-invalid="true"', page) == ["items"]
    assert page.count('class="field-error"') == 1


@pytest.mark.parametrize("path", ["/", "/login", "/jobs/new", "/tokens", "/usage", "/exports"])
def test_every_page_has_a_skip_link_and_a_favicon(client: FlaskClient, admin: UserRecord,
                                                  path: str) -> None:  # fmt: skip
    if path != "/login":
        sign_in(client)
    page = text_of(client.get(path))
    body = page[page.index("<body>") :]
    first_link = re.search(r"<a [^>]*>", body)
    assert first_link and 'class="skip-link" href="#main"' in first_link.group(0)
    assert '<main id="main"' in page
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page


def test_the_favicon_is_served_at_the_usual_address(client: FlaskClient) -> None:
    for path in ("/favicon.ico", "/static/favicon.svg"):
        with client.get(path) as response:
            assert response.status_code == 200, path
            assert response.mimetype == "image/svg+xml"
            assert response.get_data(as_text=True).lstrip().startswith("<svg")


def test_players_and_buttons_are_named_for_a_screen_reader(
    client: FlaskClient, svc: Services, admin: UserRecord
) -> None:
    token = sign_in(client)
    job_id = finished_job(svc, admin, client, token, 2)
    page = text_of(client.get(f"/jobs/{job_id}"))
    labels = re.findall(r'<audio [^>]*aria-label="([^"]+)"', page)
    assert labels == ["Audio of item 1", "Audio of item 2"]
    client.post("/tokens", data={"name": "nightly", "csrf_token": csrf_from(client, "/tokens")})
    tokens = text_of(client.get("/tokens"))
    assert 'aria-label="Revoke the token nightly"' in tokens
    assert "<th></th>" not in tokens
