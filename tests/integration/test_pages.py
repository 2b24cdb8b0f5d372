"""The admin pages through the Flask test client, on SQLite and PostgreSQL."""

from __future__ import annotations

import html
import io
import re
import threading

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from speechbatch.adapters.models import Item
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import get_job
from tests.fakes import FakeProvider, permanent
from tests.helpers import ago, claim, new_admin, new_job, set_items, set_job, view, wait_for

PASSWORD = "password-1"
HOSTILE = '<script>alert("x")</script>'


def csrf_from(client: FlaskClient, path: str = "/login") -> str:
    """The CSRF token of the hidden input on a page."""
    page = client.get(path).get_data(as_text=True)
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match, f"no csrf_token field on {path}"
    return match.group(1)


def sign_in(client: FlaskClient, email: str = "admin@acme.test") -> str:
    """Sign in through the login form; return a CSRF token of the new session."""
    response = client.post(
        "/login", data={"email": email, "password": PASSWORD, "csrf_token": csrf_from(client)}
    )
    assert response.status_code == 302
    return csrf_from(client, "/jobs/new")


@pytest.fixture
def browser(client: FlaskClient, admin: UserRecord) -> tuple[FlaskClient, str]:
    """A client signed in as the admin, and its CSRF token."""
    return client, sign_in(client)


def text_of(response: TestResponse) -> str:
    """The body of a test response as text."""
    return response.get_data(as_text=True)


def job_count(svc: Services, admin: UserRecord) -> int:
    """How many jobs the admin's organization has."""
    with svc.uow_factory() as uow:
        return uow.views.jobs_stamp(admin.organization_id, status=None).total


# --- sign in and out ------------------------------------------------------------------


def test_login_page_has_the_fields(client: FlaskClient) -> None:
    page = text_of(client.get("/login"))
    for field in ('name="email"', 'name="password"', 'name="csrf_token"'):
        assert field in page


def test_wrong_password_signs_nobody_in(client: FlaskClient, admin: UserRecord) -> None:
    response = client.post(
        "/login",
        data={"email": admin.email, "password": "wrong-password", "csrf_token": csrf_from(client)},
    )
    assert response.status_code == 401
    assert "Wrong email or password." in text_of(response)
    assert f'value="{admin.email}"' in text_of(response)
    with client.session_transaction() as session:
        assert "sid" not in session
    assert client.get("/").status_code == 302


def test_login_signs_in_and_goes_to_next(client: FlaskClient, admin: UserRecord) -> None:
    response = client.post(
        "/login",
        data={
            "email": admin.email,
            "password": PASSWORD,
            "next": "/jobs/new",
            "csrf_token": csrf_from(client),
        },
    )
    assert response.status_code == 302
    assert response.headers["Location"] == "/jobs/new"
    with client.session_transaction() as session:
        assert isinstance(session["sid"], str) and session["email"] == admin.email
        assert session.permanent
    assert client.get("/").status_code == 200


@pytest.mark.parametrize("target", ["https://evil.test/", "//evil.test/x", "/\\evil.test"])
def test_login_ignores_a_next_pointing_elsewhere(
    client: FlaskClient, admin: UserRecord, target: str
) -> None:
    response = client.post(
        "/login",
        data={
            "email": admin.email,
            "password": PASSWORD,
            "next": target,
            "csrf_token": csrf_from(client),
        },
    )
    assert response.headers["Location"] == "/"


def test_logout_signs_out(browser: tuple[FlaskClient, str]) -> None:
    client, token = browser
    response = client.post("/logout", data={"csrf_token": token})
    assert response.status_code == 302
    assert response.headers["Location"] == "/login"
    assert client.get("/").status_code == 302


@pytest.mark.parametrize("path", ["/", "/jobs/new", "/jobs/1", "/?status=FAILED&page=2"])
def test_pages_redirect_to_login_without_session(client: FlaskClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/login?next=")


def test_login_without_csrf_token_is_refused(client: FlaskClient, admin: UserRecord) -> None:
    response = client.post("/login", data={"email": admin.email, "password": PASSWORD})
    assert response.status_code == 400
    assert "CSRF" in text_of(response)
    with client.session_transaction() as session:
        assert "sid" not in session


def test_form_post_without_csrf_token_changes_nothing(
    app: Flask, browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    assert app.config.get("WTF_CSRF_ENABLED", True)
    client, _ = browser
    job_id = new_job(svc, admin)
    response = client.post("/jobs", data={"title": "t", "voice": "alloy", "items": "a"})
    assert response.status_code == 400
    assert client.post(f"/jobs/{job_id}/generate").status_code == 400
    assert client.post(f"/jobs/{job_id}/generate", data={"csrf_token": "forged"}).status_code == 400
    assert client.post("/logout").status_code == 400
    assert job_count(svc, admin) == 1
    assert view(svc, admin, job_id)["status"] == "PENDING"
    assert client.get("/").status_code == 200  # still signed in


# --- the job list ---------------------------------------------------------------------


def test_job_list_shows_jobs_newest_first(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, _ = browser
    new_job(svc, admin, title="first job")
    new_job(svc, admin, title="second job")
    page = text_of(client.get("/"))
    assert page.index("second job") < page.index("first job")
    assert "badge-pending" in page
    assert 'role="progressbar"' in page


def test_job_list_filters_by_status(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, _ = browser
    new_job(svc, admin, title="still pending")
    failed = new_job(svc, admin, title="went wrong")
    set_job(svc, failed, status="FAILED")
    page = text_of(client.get("/?status=FAILED"))
    assert "went wrong" in page
    assert "still pending" not in page
    assert "still pending" in text_of(client.get("/?status=bogus"))  # unknown filter: all


def test_job_list_paginates_by_twenty(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, _ = browser
    for n in range(1, 23):
        new_job(svc, admin, n=1, title=f"job number {n:02d}")
    first = text_of(client.get("/"))
    second = text_of(client.get("/?page=2"))
    assert first.count("<tr data-job-id=") == 20
    assert "job number 22" in first and "job number 03" in first
    assert "job number 02" not in first
    assert second.count("<tr data-job-id=") == 2
    assert "job number 01" in second and "job number 02" in second
    assert "Page 2 of 2" in second
    assert client.get("/?page=nonsense").status_code == 200


# --- new job --------------------------------------------------------------------------


def test_new_job_form_lists_the_provider_voices(browser: tuple[FlaskClient, str]) -> None:
    client, _ = browser
    page = text_of(client.get("/jobs/new"))
    assert '<option value="alloy"' in page and '<option value="echo"' in page


def test_new_job_from_pasted_lines(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, token = browser
    response = client.post(
        "/jobs",
        data={
            "title": "  Greetings ",
            "voice": "echo",
            "items": "Hello\n\n  world  \r\nthird line\n",
            "csrf_token": token,
        },
    )
    assert response.status_code == 302
    job_id = int(response.headers["Location"].rsplit("/", 1)[1])
    job = view(svc, admin, job_id)
    assert (job["title"], job["voice"]) == ("Greetings", "echo")
    assert [i["text"] for i in job["items"]] == ["Hello", "world", "third line"]
    assert "Job created" in text_of(client.get(response.headers["Location"]))


@pytest.mark.parametrize(
    ("filename", "content", "expected"),
    [
        ("lines.txt", b"one\ntwo\n\nthree\n", ["one", "two", "three"]),
        ("items.csv", b'text,note\n"Hello, world",x\nsecond,y\n', ["Hello, world", "second"]),
        ("bom.txt", "\ufeffcaf\u00e9\n".encode(), ["caf\u00e9"]),
    ],
)
def test_new_job_from_an_upload(
    browser: tuple[FlaskClient, str],
    svc: Services,
    admin: UserRecord,
    filename: str,
    content: bytes,
    expected: list[str],
) -> None:
    client, token = browser
    response = client.post(
        "/jobs",
        data={
            "title": "upload",
            "voice": "alloy",
            "items": "",
            "file": (io.BytesIO(content), filename),
            "csrf_token": token,
        },
        content_type="multipart/form-data",
    )
    assert response.status_code == 302
    job_id = int(response.headers["Location"].rsplit("/", 1)[1])
    assert [i["text"] for i in view(svc, admin, job_id)["items"]] == expected


def test_upload_that_is_not_utf8_is_refused(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, token = browser
    response = client.post(
        "/jobs",
        data={
            "title": "upload",
            "voice": "alloy",
            "file": (io.BytesIO(b"\xff\xfe\x00bad"), "x.txt"),
            "csrf_token": token,
        },
        content_type="multipart/form-data",
    )
    assert response.status_code == 422
    assert 'id="file-error"' in text_of(response)
    assert job_count(svc, admin) == 0


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"title": "   ", "voice": "alloy", "items": "kept line"}, "title", "title is required"),
        ({"title": "kept title", "voice": "nope", "items": "kept line"}, "voice", "voice must"),
        ({"title": "kept title", "voice": "alloy", "items": " \n "}, "items", "at least one"),
        ({"title": "kept title", "voice": "alloy", "items": "x" * 4097}, "items", "longer"),
    ],
)
def test_validation_error_is_shown_next_to_the_field_with_input_kept(
    browser: tuple[FlaskClient, str],
    svc: Services,
    admin: UserRecord,
    data: dict[str, str],
    field: str,
    message: str,
) -> None:
    client, token = browser
    response = client.post("/jobs", data={**data, "csrf_token": token})
    assert response.status_code == 422
    page = text_of(response)
    match = re.search(rf'<p class="field-error" id="{field}-error">([^<]*)</p>', page)
    assert match and message in html.unescape(match.group(1))
    if data["title"].strip():
        assert 'value="kept title"' in page
    if "kept line" in data["items"]:
        assert "kept line</textarea>" in page
    assert job_count(svc, admin) == 0


# --- the job page ---------------------------------------------------------------------


def test_job_page_shows_items_players_and_runs(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, _ = browser
    job_id = new_job(svc, admin, n=2, title="players")
    start = client.post(f"/jobs/{job_id}/generate", data={"csrf_token": csrf_from(client, "/")})
    assert start.status_code == 302
    wait_for(lambda: view(svc, admin, job_id)["status"] == "COMPLETED")
    page = text_of(client.get(f"/jobs/{job_id}"))
    items = view(svc, admin, job_id)["items"]
    for item in items:
        player = f'src="{item["audio_url"]}" aria-label="Audio of item {item["position"]}"'
        assert f'<audio controls preload="metadata" {player}></audio>' in page
    assert 'aria-valuenow="100"' in page
    assert "2 of 2 done" in page
    assert "admin@acme.test" in page  # run history: started by
    assert "badge-completed" in page
    assert f'data-summary-url="/api/jobs/{job_id}?items=none"' in page
    assert "Regenerate" in page and 'id="btn-generate" class="btn btn-primary" disabled' in page


def item_rows(page: str) -> list[str]:
    """The positions of the item rows of a job page, in order."""
    return re.findall(r'<tr data-item-id="\d+"[^>]*>\s*<td class="muted cell-id">(\d+)</td>', page)


def test_job_page_shows_a_hundred_items_a_page(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, _ = browser
    job_id = new_job(svc, admin, n=130, title="long job")
    first = text_of(client.get(f"/jobs/{job_id}"))
    second = text_of(client.get(f"/jobs/{job_id}?page=2"))
    assert item_rows(first) == [str(n) for n in range(1, 101)]
    assert item_rows(second) == [str(n) for n in range(101, 131)]
    assert "Page 1 of 2 · 130 items" in first and "Page 2 of 2 · 130 items" in second
    assert f'href="/jobs/{job_id}?page=2" rel="next"' in first
    assert f'href="/jobs/{job_id}?page=1" rel="prev"' in second
    assert 'data-page="2" data-per-page="100" data-total="130"' in second


def test_job_page_filters_items_by_status(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    client, token = browser
    job_id = new_job(svc, admin, n=4)
    provider.fail_texts["text 3"] = permanent()
    client.post(f"/jobs/{job_id}/generate", data={"csrf_token": token})
    wait_for(lambda: view(svc, admin, job_id)["status"] == "FAILED")
    errors = text_of(client.get(f"/jobs/{job_id}?status=error"))
    done = text_of(client.get(f"/jobs/{job_id}?status=DONE"))
    assert item_rows(errors) == ["3"]
    assert item_rows(done) == ["1", "2", "4"]
    assert 'data-filter="ERROR"' in errors and "Page 1 of 1 · 1 item<" in errors
    assert re.search(r'data-filter="DONE" aria-current="true">Done <span[^>]*>3</span>', done)
    assert "No pending items." in text_of(client.get(f"/jobs/{job_id}?status=PENDING"))
    assert item_rows(text_of(client.get(f"/jobs/{job_id}?status=bogus"))) == ["1", "2", "3", "4"]


def test_job_page_past_the_last_page_links_to_the_first(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, _ = browser
    job_id = new_job(svc, admin, n=3)
    page = text_of(client.get(f"/jobs/{job_id}?page=7"))
    assert item_rows(page) == []
    assert f'No items on this page. <a href="/jobs/{job_id}">Go to the first page</a>' in page
    assert client.get(f"/jobs/{job_id}?page=nonsense").status_code == 200
    assert client.get(f"/jobs/{job_id}?page=99999999999999999999").status_code == 200
    assert client.get("/?page=99999999999999999999").status_code == 200


def test_job_page_polls_the_summary_and_its_own_page_of_items(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, _ = browser
    job_id = new_job(svc, admin, n=3)
    page = text_of(client.get(f"/jobs/{job_id}?status=PENDING&page=1"))
    assert f'data-summary-url="/api/jobs/{job_id}?items=none"' in page
    assert f'data-items-url="/api/jobs/{job_id}/items"' in page
    assert 'data-filter="PENDING"' in page


def test_job_list_polls_its_own_page(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, _ = browser
    new_job(svc, admin)
    page = text_of(client.get("/?status=PENDING&page=1"))
    assert 'data-api-url="/api/jobs?status=PENDING&amp;page=1&amp;per_page=20"' in page


@pytest.mark.parametrize("path", ["/", "/jobs/{job_id}"])
def test_pages_carry_no_inline_script_or_style(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord, path: str
) -> None:
    client, _ = browser
    job_id = new_job(svc, admin)
    page = text_of(client.get(path.format(job_id=job_id)))
    assert re.findall(r"<script[^>]*>", page) == [
        '<script type="module" src="/static/app.js">'
    ]  # the Content-Security-Policy allows scripts from files only
    assert " style=" not in page and " on" + "click=" not in page
    assert 'data-width="0"' in page


def test_generate_button_starts_a_run_and_says_so(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    client, token = browser
    job_id = new_job(svc, admin, n=3)
    response = client.post(f"/jobs/{job_id}/generate", data={"csrf_token": token})
    assert response.status_code == 302
    assert response.headers["Location"] == f"/jobs/{job_id}"
    assert "Generation started (run 1)." in text_of(client.get(f"/jobs/{job_id}"))
    wait_for(lambda: view(svc, admin, job_id)["status"] == "COMPLETED")
    assert provider.total_calls() == 3


def test_generate_conflict_becomes_a_flash_message(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    client, token = browser
    job_id = new_job(svc, admin, n=2)
    provider.gate = threading.Event()
    try:
        client.post(f"/jobs/{job_id}/generate", data={"csrf_token": token})
        again = client.post(f"/jobs/{job_id}/generate", data={"csrf_token": token})
        assert again.status_code == 302
        page = text_of(client.get(f"/jobs/{job_id}"))
        assert "already generating" in page
        assert 'id="btn-generate" class="btn btn-primary" disabled' in page
        assert 'id="btn-regenerate" class="btn" disabled' in page
        assert 'id="job-live" class="live">' in page
    finally:
        provider.gate.set()
    wait_for(lambda: view(svc, admin, job_id)["status"] == "COMPLETED")
    response = client.post(f"/jobs/{job_id}/generate", data={"csrf_token": token})
    assert response.status_code == 302
    assert "already has its audio" in text_of(client.get(f"/jobs/{job_id}"))
    assert provider.total_calls() == 2


def test_regenerate_button_sends_every_item_again(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    client, token = browser
    job_id = new_job(svc, admin, n=2)
    client.post(f"/jobs/{job_id}/generate", data={"csrf_token": token})
    wait_for(lambda: view(svc, admin, job_id)["status"] == "COMPLETED")
    page = text_of(client.get(f"/jobs/{job_id}"))
    assert 'data-confirm="Regenerate sends every item' in page
    response = client.post(f"/jobs/{job_id}/regenerate", data={"csrf_token": token})
    assert response.status_code == 302
    assert "Regeneration started (run 2)." in text_of(client.get(f"/jobs/{job_id}"))
    wait_for(lambda: view(svc, admin, job_id)["status"] == "COMPLETED")
    assert provider.total_calls() == 4
    assert [r["kind"] for r in view(svc, admin, job_id)["runs"]] == ["generate", "regenerate"]


def test_recovered_run_shows_a_banner_and_a_retry_button(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, _ = browser
    job_id = new_job(svc, admin, n=3)
    assert claim(svc, admin, job_id) == 1
    first = view(svc, admin, job_id)["items"][0]["id"]
    set_items(svc, job_id, Item.id == first, status="DONE")
    set_items(svc, job_id, updated_at=ago(3600))
    set_job(svc, job_id, updated_at=ago(3600), started_at=ago(3600))
    page = text_of(client.get(f"/jobs/{job_id}"))
    assert 'class="banner banner-recovered"' in page
    assert "recovered automatically" in page
    assert "1 of 3 items are done." in page
    assert "you do not pay again for finished items" in page
    assert re.search(r'id="btn-generate" class="btn btn-primary">Retry</button>', page)


def test_interrupted_run_shows_a_banner(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, _ = browser
    job_id = new_job(svc, admin, n=2)
    claim(svc, admin, job_id)
    with svc.uow_factory() as uow:
        assert uow.runs.interrupt_run(job_id, 1, "interrupted: the server stopped")
        uow.commit()
    page = text_of(client.get(f"/jobs/{job_id}"))
    assert 'class="banner banner-interrupted"' in page
    assert "was interrupted because its server was shut down" in page


def test_other_organizations_job_is_not_found(
    browser: tuple[FlaskClient, str], svc: Services, provider: FakeProvider
) -> None:
    client, token = browser
    other = new_admin(svc, "globex", "boss@globex.test", PASSWORD)
    job_id = new_job(svc, other, title="secret plans")
    response = client.get(f"/jobs/{job_id}")
    assert response.status_code == 404
    assert "secret plans" not in text_of(response)
    assert 'class="card error-page"' in text_of(response)
    assert client.post(f"/jobs/{job_id}/generate", data={"csrf_token": token}).status_code == 404
    assert client.post(f"/jobs/{job_id}/regenerate", data={"csrf_token": token}).status_code == 404
    assert "secret plans" not in text_of(client.get("/"))
    assert view(svc, other, job_id)["status"] == "PENDING"
    assert provider.total_calls() == 0


def test_missing_page_uses_the_error_layout(browser: tuple[FlaskClient, str]) -> None:
    client, _ = browser
    response = client.get("/no/such/page")
    assert response.status_code == 404
    page = text_of(response)
    assert "Not found" in page and 'class="topbar"' in page


def test_server_error_uses_the_error_layout(app: Flask, client: FlaskClient) -> None:
    def explode() -> str:
        raise RuntimeError("secret detail")

    app.add_url_rule("/explode", "explode", explode)
    response = client.get("/explode")
    assert response.status_code == 500
    page = text_of(response)
    assert "Something went wrong on our side." in page
    assert "secret detail" not in page
    assert 'class="card error-page"' in page


def test_hostile_text_is_escaped(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, token = browser
    response = client.post(
        "/jobs",
        data={
            "title": HOSTILE,
            "voice": "alloy",
            "items": f"{HOSTILE}\nplain",
            "csrf_token": token,
        },
    )
    job_url = response.headers["Location"]
    pages = [text_of(client.get(job_url)), text_of(client.get("/"))]
    invalid = client.post(
        "/jobs", data={"title": HOSTILE, "voice": HOSTILE, "items": HOSTILE, "csrf_token": token}
    )
    pages.append(text_of(invalid))
    for page in pages:
        assert HOSTILE not in page
        assert html.escape(HOSTILE) in page or "&lt;script&gt;" in page


# --- the JSON API with the browser session --------------------------------------------


def test_api_write_with_the_session_needs_the_csrf_header(
    browser: tuple[FlaskClient, str], svc: Services, admin: UserRecord
) -> None:
    client, token = browser
    job_id = new_job(svc, admin, n=1)
    assert client.get(f"/api/jobs/{job_id}").status_code == 200
    refused = client.post(f"/api/jobs/{job_id}/generate")
    assert refused.status_code == 400
    assert refused.get_json()["error"]["code"] == "bad_request"
    assert view(svc, admin, job_id)["status"] == "PENDING"
    accepted = client.post(f"/api/jobs/{job_id}/generate", headers={"X-CSRFToken": token})
    assert accepted.status_code == 202
    assert accepted.get_json()["attempt"] == 1
    wait_for(lambda: get_job(svc.uow_factory, svc.settings, admin, job_id)["status"] == "COMPLETED")
