"""Sign-in throttling and token revocation across two gunicorn workers, on both databases.

Every request goes on a fresh connection (``Connection: close``), so consecutive requests
land on either worker: what one process counted or revoked must hold in the other.
"""

from __future__ import annotations

import re

import requests

from tests.e2e.conftest import ServerFactory
from tests.support.server import ADMIN_EMAIL, ADMIN_PASSWORD

FRESH = {"Connection": "close"}


def _login_page(browser: requests.Session, base_url: str) -> str:
    page = browser.get(f"{base_url}/login", headers=FRESH, timeout=10)
    assert page.status_code == 200
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match
    return match[1]


def _sign_in(browser: requests.Session, base_url: str, password: str) -> requests.Response:
    data = {
        "email": ADMIN_EMAIL,
        "password": password,
        "csrf_token": _login_page(browser, base_url),
    }
    return browser.post(
        f"{base_url}/login", data=data, headers=FRESH, allow_redirects=False, timeout=10
    )


def test_sign_in_throttle_holds_across_workers(spawn_server: ServerFactory) -> None:
    server = spawn_server(workers=2, threads=2)
    browser = requests.Session()
    for _ in range(5):
        assert _sign_in(browser, server.base_url, "wrong-password").status_code == 401
    refused = _sign_in(browser, server.base_url, ADMIN_PASSWORD)
    assert refused.status_code == 429
    assert 14 * 60 < int(refused.headers["Retry-After"]) <= 15 * 60
    assert "Try again in 15 minutes" in refused.text
    # Still refused, whichever worker answers.
    for _ in range(6):
        assert _sign_in(browser, server.base_url, ADMIN_PASSWORD).status_code == 429


def test_signed_in_session_works_on_every_worker(spawn_server: ServerFactory) -> None:
    server = spawn_server(workers=2, threads=2)
    browser = requests.Session()
    assert _sign_in(browser, server.base_url, ADMIN_PASSWORD).status_code == 302
    for _ in range(10):
        page = browser.get(f"{server.base_url}/tokens", headers=FRESH, timeout=10)
        assert page.status_code == 200 and page.url.endswith("/tokens")


def test_revoked_token_fails_at_once_on_every_worker(
    spawn_server: ServerFactory, api_token: str
) -> None:
    server = spawn_server(workers=2, threads=2)
    admin = {"Authorization": f"Bearer {api_token}", **FRESH}
    created = requests.post(
        f"{server.base_url}/api/tokens", json={"name": "doomed"}, headers=admin, timeout=10
    ).json()
    doomed = {"Authorization": f"Bearer {created['token']}", **FRESH}
    for _ in range(6):
        assert requests.get(f"{server.base_url}/api/voices", headers=doomed, timeout=10).ok
    revoked = requests.delete(
        f"{server.base_url}/api/tokens/{created['id']}", headers=admin, timeout=10
    )
    assert revoked.status_code == 204
    for _ in range(10):
        answer = requests.get(f"{server.base_url}/api/voices", headers=doomed, timeout=10)
        assert answer.status_code == 401
    assert requests.get(f"{server.base_url}/api/voices", headers=admin, timeout=10).ok
