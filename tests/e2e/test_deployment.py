"""Sign-in throttling and token revocation across two gunicorn workers, on both databases.

Every request goes on a fresh connection (``Connection: close``), so consecutive requests
land on either worker: what one process counted or revoked must hold in the other.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.e2e.conftest import ServerFactory
from tests.support.server import ADMIN_EMAIL, ADMIN_PASSWORD, REPO_ROOT, VENV_BIN, GunicornServer

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


# gunicorn's access log names the worker (PID) that answered each request.
ACCESS_LOG = ("--access-logfile", "-", "--access-logformat", "answered-by %(p)s %(m)s %(U)s %(s)s")
MAX_REQUESTS = 80  # fresh connections until both workers have answered (each one is checked)


def _two_workers(spawn_server: ServerFactory) -> GunicornServer:
    return spawn_server(workers=2, threads=2, extra_args=ACCESS_LOG)


def _answering_workers(server: GunicornServer, method: str, path: str) -> set[str]:
    """The worker PIDs that have answered ``method path`` so far, from the access log."""
    pattern = re.compile(rf"answered-by <?(\d+)>? {method} {re.escape(path)} ")
    return set(pattern.findall(server.log_text(2_000_000)))


def _until_both_workers(
    server: GunicornServer, method: str, path: str, request: Callable[[], None]
) -> None:
    """Send ``request`` (which asserts its own answer) until both workers have answered."""
    for _ in range(MAX_REQUESTS):
        request()
        if len(_answering_workers(server, method, path)) == 2:
            return
    raise AssertionError(
        f"{MAX_REQUESTS} fresh connections to {path} reached one worker only: "
        f"{_answering_workers(server, method, path)}"
    )


def test_sign_in_throttle_holds_across_workers(spawn_server: ServerFactory) -> None:
    server = _two_workers(spawn_server)
    browser = requests.Session()
    for _ in range(5):
        assert _sign_in(browser, server.base_url, "wrong-password").status_code == 401
    refused = _sign_in(browser, server.base_url, ADMIN_PASSWORD)
    assert refused.status_code == 429
    assert 14 * 60 < int(refused.headers["Retry-After"]) <= 15 * 60
    assert "Try again in 15 minutes" in refused.text

    def still_refused() -> None:  # the right password, whichever worker answers
        assert _sign_in(browser, server.base_url, ADMIN_PASSWORD).status_code == 429

    _until_both_workers(server, "POST", "/login", still_refused)


def test_signed_in_session_works_on_every_worker(spawn_server: ServerFactory) -> None:
    server = _two_workers(spawn_server)
    browser = requests.Session()
    assert _sign_in(browser, server.base_url, ADMIN_PASSWORD).status_code == 302

    def signed_in_page() -> None:
        page = browser.get(f"{server.base_url}/tokens", headers=FRESH, timeout=10)
        assert page.status_code == 200 and page.url.endswith("/tokens")

    _until_both_workers(server, "GET", "/tokens", signed_in_page)


def test_revoked_token_fails_at_once_on_every_worker(
    spawn_server: ServerFactory, api_token: str
) -> None:
    server = _two_workers(spawn_server)
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
    seen_before = _answering_workers(server, "GET", "/api/voices")

    def refused() -> None:
        for endpoint in ("/api/voices", "/api/jobs"):
            answer = requests.get(f"{server.base_url}{endpoint}", headers=doomed, timeout=10)
            assert answer.status_code == 401, (endpoint, answer.status_code)

    # Both workers refuse it (the poll's one-statement path included), from the first try.
    _until_both_workers(server, "GET", "/api/jobs", refused)
    assert seen_before  # the token worked before
    assert requests.get(f"{server.base_url}/api/voices", headers=admin, timeout=10).ok


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"SPEECHBATCH_ENV": "prod"}, "SPEECHBATCH_ENV"),
        ({"SPEECHBATCH_ENV": "production"}, "SPEECHBATCH_SECRET_KEY"),
        ({"SPEECHBATCH_TTS_PROVIDER": "nonesuch"}, "SPEECHBATCH_TTS_PROVIDER"),
        ({"SPEECHBATCH_RUNNER": "workers"}, "SPEECHBATCH_RUNNER"),
    ],
)
@pytest.mark.parametrize("command", ["gunicorn", "flask", "worker"])
def test_bad_configuration_stops_the_process_with_one_line(
    tmp_path: Path, variables: dict[str, str], named: str, command: str
) -> None:
    """gunicorn wsgi:app, the CLI and the worker tier refuse to start on bad configuration:
    exit 1 and one line on stderr naming the variable (no traceback, no worker left running)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECHBATCH_")}
    env.update(variables, SPEECHBATCH_DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite'}")
    args = {
        "gunicorn": [str(VENV_BIN / "gunicorn"), "wsgi:app", "-b", "127.0.0.1:0"],
        "flask": [str(VENV_BIN / "flask"), "--app", "wsgi", "recover"],
        "worker": [str(VENV_BIN / "flask"), "--app", "wsgi", "worker"],
    }[command]
    done = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines() if "configuration error" in line]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("speechbatch: configuration error: " + named), errors
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
