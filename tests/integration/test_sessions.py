"""Sessions that end on the server (issue 42), both databases: after sign-out a copy of
the cookie signs in nobody, in this process or another; "sign out everywhere" ends every
session of the admin, this one included, and leaves other admins' alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.config import Settings
from tests.conftest import app_for_tests, services
from tests.fakes import FakeProvider
from tests.helpers import new_admin
from tests.integration.test_pages import browser, csrf_from, sign_in  # noqa: F401 (fixture)

COOKIE = "session"


def _copy(client: FlaskClient, app: Flask) -> FlaskClient:
    """Another browser holding a copy of ``client``'s session cookie."""
    cookie = client.get_cookie(COOKIE)
    assert cookie is not None
    other = app.test_client()
    other.set_cookie(COOKIE, cookie.value)
    return other


def _signed_in(client: FlaskClient) -> bool:
    return client.get("/").status_code == 200


@pytest.fixture
def second_process(settings: Settings, provider: FakeProvider) -> Iterator[Flask]:
    """Another app on the same database and key, as another gunicorn worker would be."""
    yield from app_for_tests(settings, provider)


def test_a_copy_of_the_cookie_signs_in_nobody_after_sign_out(
    app: Flask, client: FlaskClient, admin: UserRecord
) -> None:
    token = sign_in(client)
    copy = _copy(client, app)
    assert _signed_in(copy)
    assert client.post("/logout", data={"csrf_token": token}).status_code == 302
    assert not _signed_in(client)
    assert not _signed_in(copy)  # it kept working for 31 days before


def test_a_session_ended_in_one_process_is_ended_in_another(
    app: Flask, client: FlaskClient, admin: UserRecord, second_process: Flask
) -> None:
    token = sign_in(client)
    elsewhere = _copy(client, second_process)
    assert _signed_in(elsewhere)
    client.post("/logout", data={"csrf_token": token})
    assert not _signed_in(elsewhere)


def test_sign_out_ends_only_that_session(app: Flask, admin: UserRecord) -> None:
    laptop, phone = app.test_client(), app.test_client()
    token = sign_in(laptop)
    sign_in(phone)
    laptop.post("/logout", data={"csrf_token": token})
    assert not _signed_in(laptop) and _signed_in(phone)


def test_sign_out_everywhere_ends_every_session_of_the_admin(app: Flask, admin: UserRecord) -> None:
    new_admin(services(app), "other", "admin@other.test", "password-1")
    laptop, phone, someone_else = app.test_client(), app.test_client(), app.test_client()
    token = sign_in(laptop)
    sign_in(phone)
    sign_in(someone_else, "admin@other.test")
    copy = _copy(laptop, app)
    answer = laptop.post("/sessions/revoke-all", data={"csrf_token": token})
    assert answer.status_code == 302 and answer.headers["Location"] == "/login"
    assert "Signed out everywhere (2 sessions ended)" in laptop.get("/login").get_data(True)
    assert not any(_signed_in(c) for c in (laptop, phone, copy))
    assert _signed_in(someone_else)


def test_sign_out_everywhere_needs_the_csrf_token(app: Flask, admin: UserRecord) -> None:
    client = app.test_client()
    sign_in(client)
    assert client.post("/sessions/revoke-all").status_code == 400
    assert _signed_in(client)


def test_the_tokens_page_offers_sign_out_everywhere(
    browser: tuple[FlaskClient, str],  # noqa: F811
) -> None:
    client, _token = browser
    page = client.get("/tokens").get_data(as_text=True)
    assert 'action="/sessions/revoke-all"' in page and "Sign out everywhere" in page


def test_a_stale_cookie_shows_the_sign_in_page_signed_out(
    app: Flask, client: FlaskClient, admin: UserRecord
) -> None:
    token = sign_in(client)
    copy = _copy(client, app)
    client.post("/logout", data={"csrf_token": token})
    page = copy.get("/login").get_data(as_text=True)
    assert "Sign out" not in page and admin.email not in page
    assert csrf_from(copy)  # the sign-in form still works for it
