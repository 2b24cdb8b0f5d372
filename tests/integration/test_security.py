"""Security headers on every answer, and the request limits the contract states."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from flask.testing import FlaskClient

from speechbatch import create_app
from speechbatch.adapters.repositories import UserRecord
from speechbatch.config import Settings
from tests.conftest import close_services, services
from tests.fakes import FakeProvider
from tests.integration.test_pages import csrf_from, sign_in, text_of


@pytest.mark.parametrize("path", ["/login", "/healthz", "/api/jobs", "/api/openapi.json", "/x"])
def test_every_answer_carries_the_security_headers(client: FlaskClient, path: str) -> None:
    headers = client.get(path).headers
    csp = headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "same-origin"
    assert headers["X-Frame-Options"] == "DENY"
    assert "Strict-Transport-Security" not in headers


def test_production_adds_hsts(settings: Settings, provider: FakeProvider) -> None:
    app = create_app(replace(settings, env="production"), provider=provider)
    headers = app.test_client().get("/login").headers
    assert headers["Strict-Transport-Security"].startswith("max-age=")


def test_production_session_cookie_is_secure_and_http_only(
    settings: Settings, provider: FakeProvider, admin: UserRecord
) -> None:
    app = create_app(replace(settings, env="production"), provider=provider)
    try:
        client = app.test_client()
        client.get("/login")
        csrf = csrf_from(client)
        response = client.post(
            "/login",
            data={"email": admin.email, "password": "password-1", "csrf_token": csrf},
        )
        assert response.status_code == 302
        cookie = response.headers["Set-Cookie"]
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    finally:
        close_services(services(app))


def test_development_session_cookie_is_not_marked_secure(
    client: FlaskClient, admin: UserRecord
) -> None:
    """Plain http://127.0.0.1 in development: a Secure cookie would never come back."""
    client.get("/login")
    response = client.post(
        "/login",
        data={"email": admin.email, "password": "password-1", "csrf_token": csrf_from(client)},
    )
    assert response.status_code == 302
    assert "Secure" not in response.headers["Set-Cookie"]


def test_pages_have_no_inline_script_or_style(client: FlaskClient, admin: UserRecord) -> None:
    sign_in(client)
    for path in ("/", "/jobs/new", "/tokens", "/exports", "/usage"):
        page = text_of(client.get(path))
        assert "<script>" not in page and " style=" not in page and "onclick" not in page


def test_a_paste_of_5000_items_of_4096_characters_is_accepted(
    client: FlaskClient, admin: UserRecord
) -> None:
    csrf = sign_in(client)
    items = "\n".join(f"{n:04d}" + "x" * 4092 for n in range(5000))
    data = {"title": "big", "voice": "alloy", "items": items, "csrf_token": csrf}
    response = client.post("/jobs", data=data)
    assert response.status_code == 302, text_of(response)[:500]


def test_413_names_the_real_limit(client: FlaskClient, auth: dict[str, str]) -> None:
    response = client.post("/api/jobs", data=b"x" * (25 * 1024 * 1024 + 1), headers=auth)
    assert response.status_code == 413
    assert response.get_json()["error"]["message"].endswith("25 MiB at most")


def test_413_on_a_page_names_the_real_limit(client: FlaskClient, admin: UserRecord) -> None:
    csrf_from(client)
    response = client.post("/jobs", data={"items": "x" * (25 * 1024 * 1024 + 1)})
    assert response.status_code == 413
    assert "25 MiB at most" in text_of(response)


def test_405_says_which_methods_are_allowed(client: FlaskClient, auth: dict[str, str]) -> None:
    response = client.put("/api/tokens", headers=auth)
    assert response.status_code == 405
    assert set(response.headers["Allow"].split(", ")) >= {"GET", "POST"}
    assert response.get_json()["error"]["code"] == "method_not_allowed"


def test_openapi_document_is_public_and_lists_every_api_route(client: FlaskClient) -> None:
    document = client.get("/api/openapi.json").get_json()
    assert document["openapi"].startswith("3.1")
    documented = {
        (path, method.upper())
        for path, item in document["paths"].items()
        for method in item
        if method != "parameters"
    }
    app = client.application
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/"):
            continue
        path = re.sub(r"<int:(\w+)>", r"{\1}", rule.rule)
        # A file-kind segment (captions.<kind>) is documented once per kind it takes.
        paths = [path.replace("<kind>", k) for k in ("vtt", "srt")] if "<kind>" in path else [path]
        assert rule.methods is not None
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            for one in paths:
                assert (one, method) in documented, (one, method)
