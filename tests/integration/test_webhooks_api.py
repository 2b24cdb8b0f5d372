"""Webhooks over the API and the /webhooks page: endpoints, tenancy, validation, the
delivery log and redeliver, CSRF (both databases). Sending is in test_webhook_delivery.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import create_token
from tests.helpers import new_admin
from tests.integration.test_pages import sign_in


def _create(client: FlaskClient, auth: dict[str, str], **body: Any) -> dict[str, Any]:
    body = {"url": "https://example.com/hook", "events": ["job.completed"], **body}
    answer = client.post("/api/webhooks", json=body, headers=auth)
    assert answer.status_code == 201, answer.get_json()
    created: dict[str, Any] = answer.get_json()
    return created


def test_create_shows_the_secret_once_and_list_never(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    created = _create(client, auth, description="cms", events=["job.failed", "job.completed"])
    assert created["secret"].startswith("whsec_")
    assert created["enabled"] is True
    assert created["events"] == ["job.completed", "job.failed"]
    assert set(created) == {
        "id", "url", "events", "description", "enabled", "secret", "created_at",
    }  # fmt: skip
    listed = client.get("/api/webhooks", headers=auth).get_json()["webhooks"]
    assert [w["id"] for w in listed] == [created["id"]]
    assert "secret" not in listed[0]


@pytest.mark.parametrize(
    "body",
    [
        {"url": "ftp://example.com/x", "events": ["job.completed"]},
        {"url": "example.com/x", "events": ["job.completed"]},
        {"url": "http:///nohost", "events": ["job.completed"]},
        {"url": 7, "events": ["job.completed"]},
        {"url": "https://example.com/x", "events": []},
        {"url": "https://example.com/x", "events": ["job.exploded"]},
        {"url": "https://example.com/x", "events": "job.completed"},
        {"url": "https://example.com/x", "events": ["job.completed"], "description": 5},
    ],
)
def test_bad_input_answers_422(
    client: FlaskClient, auth: dict[str, str], body: dict[str, Any]
) -> None:
    answer = client.post("/api/webhooks", json=body, headers=auth)
    assert answer.status_code == 422
    assert answer.get_json()["error"]["code"] == "validation_error"


def test_patch_changes_fields_and_rejects_bad_values(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    hook = _create(client, auth)
    url = f"/api/webhooks/{hook['id']}"
    changed = client.patch(
        url, json={"enabled": False, "url": "http://example.org/h", "events": ["ping"]},
        headers=auth,
    ).get_json()  # fmt: skip
    assert (changed["enabled"], changed["url"], changed["events"]) == (
        False, "http://example.org/h", ["ping"],
    )  # fmt: skip
    assert client.patch(url, json={"url": "nope"}, headers=auth).status_code == 422
    assert client.patch(url, json={"enabled": "yes"}, headers=auth).status_code == 422
    assert client.patch(url, json={"colour": "red"}, headers=auth).status_code == 422


def test_another_organizations_webhook_is_404(
    svc: Services, client: FlaskClient, auth: dict[str, str]
) -> None:
    hook = _create(client, auth)
    other = new_admin(svc, "globex", "admin@globex.test")
    theirs = {"Authorization": f"Bearer {create_token(svc.uow_factory, other.email)}"}
    base = f"/api/webhooks/{hook['id']}"
    assert client.get("/api/webhooks", headers=theirs).get_json() == {"webhooks": []}
    assert client.patch(base, json={"enabled": False}, headers=theirs).status_code == 404
    assert client.post(f"{base}/ping", headers=theirs).status_code == 404
    assert client.get(f"{base}/deliveries", headers=theirs).status_code == 404
    assert client.post(f"{base}/deliveries/1/redeliver", headers=theirs).status_code == 404
    assert client.delete(base, headers=theirs).status_code == 404
    assert client.get(f"{base}/deliveries", headers=auth).status_code == 200


def test_ping_is_logged_as_a_pending_delivery_and_redeliver_answers_202(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    hook = _create(client, auth, events=["job.completed"])
    ping = client.post(f"/api/webhooks/{hook['id']}/ping", headers=auth)
    assert ping.status_code == 202
    deliveries = client.get(f"/api/webhooks/{hook['id']}/deliveries", headers=auth).get_json()
    (delivery,) = deliveries["deliveries"]
    assert delivery["event_id"] == ping.get_json()["event_id"]
    assert (delivery["type"], delivery["status"], delivery["attempts"]) == ("ping", "PENDING", 0)
    assert delivery["delivered_at"] is None and delivery["next_attempt_at"] is not None
    redo = client.post(
        f"/api/webhooks/{hook['id']}/deliveries/{delivery['id']}/redeliver", headers=auth
    )
    assert redo.status_code == 202
    missing = f"/api/webhooks/{hook['id']}/deliveries/{delivery['id'] + 1}/redeliver"
    assert client.post(missing, headers=auth).status_code == 404


def test_delete_answers_204_and_removes_the_webhook(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    hook = _create(client, auth)
    client.post(f"/api/webhooks/{hook['id']}/ping", headers=auth)
    assert client.delete(f"/api/webhooks/{hook['id']}", headers=auth).status_code == 204
    assert client.get("/api/webhooks", headers=auth).get_json() == {"webhooks": []}
    assert client.delete(f"/api/webhooks/{hook['id']}", headers=auth).status_code == 404


def test_unauthenticated_calls_answer_401(client: FlaskClient) -> None:
    assert client.get("/api/webhooks").status_code == 401
    assert client.post("/api/webhooks", json={}).status_code == 401


def _sign_in(client: FlaskClient, email: str) -> str:
    """Sign in; a CSRF token of the new session."""
    return sign_in(client, email)


def test_page_creates_with_the_secret_shown_once_and_switches(
    client: FlaskClient, admin: UserRecord
) -> None:
    csrf = _sign_in(client, admin.email)
    form = {"url": "https://example.com/page-hook", "events": ["job.completed", "job.failed"]}
    page = client.post("/webhooks", data={**form, "csrf_token": csrf}).get_data(as_text=True)
    secret = re.search(r'class="token-secret">(whsec_[^<]+)<', page)
    assert secret is not None
    assert 'id="new-webhook"' in page
    assert "Copy its signing secret now: it is shown this once." in page
    listing = client.get("/webhooks").get_data(as_text=True)
    assert "https://example.com/page-hook" in listing and secret[1] not in listing
    hook_id = int(re.findall(r'data-webhook-id="(\d+)"', listing)[0])
    client.post(f"/webhooks/{hook_id}/disable", data={"csrf_token": csrf})
    assert "DISABLED" in client.get("/webhooks").get_data(as_text=True)
    client.post(f"/webhooks/{hook_id}/ping", data={"csrf_token": csrf})
    detail = client.get(f"/webhooks/{hook_id}").get_data(as_text=True)
    assert "ping" in detail and "PENDING" in detail


def test_page_forms_without_csrf_are_refused(client: FlaskClient, admin: UserRecord) -> None:
    _sign_in(client, admin.email)
    form = {"url": "https://example.com/x", "events": ["job.completed"]}
    assert client.post("/webhooks", data=form).status_code == 400
    assert "No webhooks yet" in client.get("/webhooks").get_data(as_text=True)


def test_page_bad_url_answers_422_and_another_orgs_webhook_404(
    svc: Services, client: FlaskClient, admin: UserRecord, auth: dict[str, str]
) -> None:
    other = new_admin(svc, "globex", "admin@globex.test")
    theirs = {"Authorization": f"Bearer {create_token(svc.uow_factory, other.email)}"}
    hook = _create(client, theirs)
    csrf = _sign_in(client, admin.email)
    bad = client.post("/webhooks", data={"url": "nope", "events": ["ping"], "csrf_token": csrf})
    assert bad.status_code == 422
    assert client.get(f"/webhooks/{hook['id']}").status_code == 404
    assert client.post(f"/webhooks/{hook['id']}/ping", data={"csrf_token": csrf}).status_code == 404
