"""API tokens: named, listed without their secret, revocable at once; through API and page."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from speechbatch.adapters.db import ago
from speechbatch.adapters.models import ApiToken
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import create_admin
from speechbatch.services.accounts import create_token, hash_token
from tests.helpers import concrete
from tests.integration.test_pages import csrf_from, sign_in, text_of

TOKEN_KEYS = {"id", "name", "prefix", "created_at", "last_used_at"}


def _create(client: FlaskClient, auth: dict[str, str], name: Any = "script") -> dict[str, Any]:
    response = client.post("/api/tokens", json={"name": name}, headers=auth)
    assert response.status_code == 201, response.get_json()
    body: dict[str, Any] = response.get_json()
    return body


def test_create_answers_the_secret_once_with_name_and_prefix(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    created = _create(client, auth, "  nightly import  ")
    assert set(created) == {"id", "name", "prefix", "token", "created_at"}
    assert created["name"] == "nightly import"
    assert created["token"].startswith(created["prefix"]) and len(created["prefix"]) == 11
    assert created["created_at"].endswith("+00:00")


def test_list_shows_the_callers_tokens_without_secrets(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    created = _create(client, auth, "second")
    listed = client.get("/api/tokens", headers=auth).get_json()["tokens"]
    assert [t["name"] for t in listed] == ["second", "cli"]
    assert all(set(t) == TOKEN_KEYS for t in listed)
    assert created["token"] not in str(listed)


def test_a_new_token_authenticates(client: FlaskClient, auth: dict[str, str]) -> None:
    token = _create(client, auth)["token"]
    headers = {"Authorization": f"Bearer {token}"}
    assert client.get("/api/voices", headers=headers).status_code == 200


def test_revoked_token_stops_working_at_once(client: FlaskClient, auth: dict[str, str]) -> None:
    created = _create(client, auth)
    other = {"Authorization": f"Bearer {created['token']}"}
    assert client.get("/api/voices", headers=other).status_code == 200
    assert client.delete(f"/api/tokens/{created['id']}", headers=auth).status_code == 204
    assert client.get("/api/voices", headers=other).status_code == 401
    listed = client.get("/api/tokens", headers=auth).get_json()["tokens"]
    assert created["id"] not in [t["id"] for t in listed]


def _new_job(client: FlaskClient, auth: dict[str, str]) -> int:
    body = {"title": "polled", "voice": "alloy", "items": ["one"]}
    response = client.post("/api/jobs", json=body, headers=auth)
    assert response.status_code == 201, response.get_json()
    job_id: int = response.get_json()["id"]
    return job_id


@pytest.mark.parametrize("path", ["/api/jobs/{id}", "/api/jobs/{id}/items"])
def test_revoked_token_cannot_poll_a_job(
    client: FlaskClient, auth: dict[str, str], path: str
) -> None:
    job_id = _new_job(client, auth)
    created = _create(client, auth)
    other = {"Authorization": f"Bearer {created['token']}"}
    assert client.get(path.format(id=job_id), headers=other).status_code == 200
    assert client.delete(f"/api/tokens/{created['id']}", headers=auth).status_code == 204
    assert client.get(path.format(id=job_id), headers=other).status_code == 401


def test_revoking_twice_is_404(client: FlaskClient, auth: dict[str, str]) -> None:
    created = _create(client, auth)
    assert client.delete(f"/api/tokens/{created['id']}", headers=auth).status_code == 204
    response = client.delete(f"/api/tokens/{created['id']}", headers=auth)
    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "not_found"


def test_another_users_token_cannot_be_revoked(
    client: FlaskClient, auth: dict[str, str], svc: Services
) -> None:
    create_admin(svc.uow_factory, "other", "eve@other.test", "password-2")
    eve = {"Authorization": f"Bearer {create_token(svc.uow_factory, 'eve@other.test')}"}
    mine = _create(client, auth)
    assert client.delete(f"/api/tokens/{mine['id']}", headers=eve).status_code == 404
    assert (
        client.get("/api/voices", headers={"Authorization": f"Bearer {mine['token']}"}).status_code
        == 200
    )
    assert [t["name"] for t in client.get("/api/tokens", headers=eve).get_json()["tokens"]] == [
        "cli"
    ]


def test_token_name_is_validated(client: FlaskClient, auth: dict[str, str]) -> None:
    for body in ({}, {"name": ""}, {"name": "   "}, {"name": 5}, {"name": "x" * 101}):
        response = client.post("/api/tokens", json=body, headers=auth)
        assert response.status_code == 422, body
        assert response.get_json()["error"]["code"] == "validation_error"


def test_tokens_api_requires_authentication(client: FlaskClient) -> None:
    assert client.get("/api/tokens").status_code == 401
    assert client.post("/api/tokens", json={"name": "x"}).status_code == 401
    assert client.delete("/api/tokens/1").status_code == 401


def test_session_write_without_csrf_header_is_refused(
    client: FlaskClient, admin: UserRecord
) -> None:
    sign_in(client)
    response = client.post("/api/tokens", json={"name": "x"})
    assert response.status_code == 400
    assert client.get("/api/tokens").get_json()["tokens"] == []


def _last_used(svc: Services, token: str) -> Any:
    with concrete(svc.uow_factory)() as uow:
        return uow.session.execute(
            select(ApiToken.last_used_at).where(ApiToken.token_hash == hash_token(token))
        ).scalar_one()


def test_last_use_is_written_at_most_once_a_minute(
    client: FlaskClient, auth: dict[str, str], svc: Services, token: str
) -> None:
    assert _last_used(svc, token) is None
    client.get("/api/voices", headers=auth)
    first = _last_used(svc, token)
    assert first is not None
    client.get("/api/voices", headers=auth)
    assert _last_used(svc, token) == first
    # A minute later (moved back in the database), the next use writes it again.
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(update(ApiToken).values(last_used_at=ago(61)))
        uow.commit()
    moved = _last_used(svc, token)
    client.get("/api/voices", headers=auth)
    assert _last_used(svc, token) > moved


def test_a_poll_writes_the_last_use(
    client: FlaskClient, auth: dict[str, str], svc: Services
) -> None:
    job_id = _new_job(client, auth)
    created = _create(client, auth)
    assert _last_used(svc, created["token"]) is None
    response = client.get(
        f"/api/jobs/{job_id}", headers={"Authorization": f"Bearer {created['token']}"}
    )
    assert response.status_code == 200
    assert _last_used(svc, created["token"]) is not None


def test_list_shows_the_last_use(client: FlaskClient, auth: dict[str, str]) -> None:
    client.get("/api/voices", headers=auth)
    (listed,) = client.get("/api/tokens", headers=auth).get_json()["tokens"]
    assert listed["last_used_at"].endswith("+00:00")


def test_cli_token_has_the_given_name(
    client: FlaskClient, auth: dict[str, str], svc: Services
) -> None:
    create_token(svc.uow_factory, "admin@acme.test", "deploy bot")
    names = [t["name"] for t in client.get("/api/tokens", headers=auth).get_json()["tokens"]]
    assert names == ["deploy bot", "cli"]


# --- the /tokens page ----------------------------------------------------------------


def test_page_creates_a_token_and_shows_it_once(client: FlaskClient, admin: UserRecord) -> None:
    sign_in(client)
    csrf = csrf_from(client, "/tokens")
    page = text_of(client.post("/tokens", data={"name": "from the page", "csrf_token": csrf}))
    match = re.search(r'class="token-secret">(sb_[^<]+)<', page)
    assert match
    assert 'id="new-token"' in page and "Copy it now: it is shown this once." in page
    assert (
        client.get("/api/voices", headers={"Authorization": f"Bearer {match[1]}"}).status_code
        == 200
    )
    again = text_of(client.get("/tokens"))
    assert "from the page" in again and match[1] not in again


def test_page_revokes_a_token(client: FlaskClient, admin: UserRecord, svc: Services) -> None:
    token = create_token(svc.uow_factory, admin.email, "old")
    sign_in(client)
    page = text_of(client.get("/tokens"))
    (token_id,) = re.findall(r'data-token-id="(\d+)"', page)
    csrf = csrf_from(client, "/tokens")
    response = client.post(f"/tokens/{token_id}/revoke", data={"csrf_token": csrf})
    assert response.status_code == 302
    assert (
        client.get("/api/voices", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    )
    assert "No tokens yet." in text_of(client.get("/tokens"))


def test_page_revoke_without_csrf_changes_nothing(
    client: FlaskClient, admin: UserRecord, svc: Services
) -> None:
    token = create_token(svc.uow_factory, admin.email, "old")
    sign_in(client)
    (token_id,) = re.findall(r'data-token-id="(\d+)"', text_of(client.get("/tokens")))
    assert client.post(f"/tokens/{token_id}/revoke").status_code == 400
    assert (
        client.get("/api/voices", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    )


def test_page_rejects_an_empty_name(client: FlaskClient, admin: UserRecord) -> None:
    sign_in(client)
    csrf = csrf_from(client, "/tokens")
    response = client.post("/tokens", data={"name": " ", "csrf_token": csrf})
    assert response.status_code == 422
    assert "name is required" in text_of(response)


def test_page_without_session_redirects_to_login(client: FlaskClient) -> None:
    response = client.get("/tokens")
    assert response.status_code == 302 and "/login" in response.headers["Location"]


def test_cli_prints_the_named_token_alone_on_the_last_line(
    app: Flask, client: FlaskClient, admin: UserRecord
) -> None:
    result = app.test_cli_runner().invoke(
        args=["create-token", "--email", admin.email, "--name", "ci deploy"]
    )
    assert result.exit_code == 0, result.output
    token = result.output.strip().splitlines()[-1]
    assert re.fullmatch(r"sb_[A-Za-z0-9_-]{43}", token)
    listed = client.get("/api/tokens", headers={"Authorization": f"Bearer {token}"}).get_json()
    assert [t["name"] for t in listed["tokens"]] == ["ci deploy"]
