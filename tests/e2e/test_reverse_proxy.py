"""The README's nginx block, run as written (only its ports and certificate replaced) by
Debian's nginx over TLS in front of a real gunicorn in production mode with
SPEECHBATCH_TRUSTED_PROXIES=1: sign-in, the CSRF checks, redirects, and the sign-in
throttle's client address (the one nginx reports; a forged one changes nothing).

The client comes over ::1 and nginx reaches gunicorn over 127.0.0.1, so the address the
app records says which one it believed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import pytest
import requests
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.conftest import IN_CI
from tests.e2e.conftest import DatabaseTemplates
from tests.support.certificates import self_signed
from tests.support.nginx import Nginx, readme_server_block
from tests.support.server import ADMIN_EMAIL, ADMIN_PASSWORD, GunicornServer, app_env

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')
STRANGER = "stranger@example.com"


@dataclass
class Proxied:
    """gunicorn behind the README's nginx block."""

    nginx: Nginx
    server: GunicornServer
    certificate: tuple[Path, Path]
    database_url: str
    folder: Path

    @property
    def base(self) -> str:
        return self.nginx.base_url

    def client(self) -> requests.Session:
        """A browser-like client that trusts the throw-away certificate."""
        session = requests.Session()
        session.trust_env = False  # REQUESTS_CA_BUNDLE would win over ``verify``
        session.verify = str(self.certificate[0])
        return session


@pytest.fixture(scope="module")
def proxied(
    db_templates: DatabaseTemplates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxied]:
    """One gunicorn (production, one trusted proxy) and nginx for the module."""
    folder = tmp_path_factory.mktemp("proxy")
    url, _token = db_templates.copy("sqlite", folder / "db")
    env = app_env(url, "http://127.0.0.1:9/v1", folder / "audio", ENV="production",
                  TRUSTED_PROXIES=1)  # fmt: skip
    server = GunicornServer(env, folder, workers=1, threads=4, name="behind-nginx")
    nginx: Nginx | None = None
    try:
        server.start()
        cert = self_signed(folder, "proxy")
        try:
            nginx = Nginx(server.port, cert, folder / "nginx").start()
        except RuntimeError as exc:
            if IN_CI:
                pytest.fail(f"nginx is required under CI: {exc}")
            pytest.skip(f"nginx did not start: {exc}")
        yield Proxied(nginx, server, cert, url, folder)
    finally:
        if nginx is not None:
            nginx.stop()
        server.stop(graceful=False)


def csrf_token(client: requests.Session, url: str) -> str:
    page = client.get(url, timeout=10)
    assert page.status_code == 200, page.text
    found = CSRF_FIELD.search(page.text)
    assert found is not None, page.text
    return found.group(1)


def sign_in(
    client: requests.Session, base: str, email: str, password: str, **headers: str
) -> requests.Response:
    token = csrf_token(client, f"{base}/login?next=/")
    return client.post(
        f"{base}/login",
        data={"csrf_token": token, "email": email, "password": password, "next": "/"},
        headers={"Referer": f"{base}/login", **headers},
        allow_redirects=False,
        timeout=10,
    )


def test_sign_in_csrf_and_redirects_work_through_the_readme_block(proxied: Proxied) -> None:
    client, base = proxied.client(), proxied.base
    away = client.get(f"{base}/", allow_redirects=False, timeout=10)
    # A forged X-Forwarded-Host is replaced by nginx: the CSRF check still sees our host.
    signed = sign_in(client, base, ADMIN_EMAIL, ADMIN_PASSWORD, **{
        "X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "http"})  # fmt: skip
    token = csrf_token(client, f"{base}/")
    job = {"title": "Proxied", "voice": "alloy", "items": ["Hello."]}
    no_token = client.post(f"{base}/api/jobs", json=job, headers={"Referer": f"{base}/"})
    created = client.post(
        f"{base}/api/jobs", json=job, headers={"X-CSRFToken": token, "Referer": f"{base}/jobs"}
    )
    assert away.status_code == 302
    assert urljoin(f"{base}/", away.headers["Location"]) == f"{base}/login?next=/"
    assert signed.status_code == 302, signed.text
    assert urljoin(f"{base}/login", signed.headers["Location"]) == f"{base}/"
    assert "secure" in signed.headers["Set-Cookie"].lower()
    assert no_token.status_code == 400 and "CSRF" in no_token.json()["error"]["message"]
    assert created.status_code == 201, created.text


def test_with_the_usual_host_header_every_sign_in_fails_the_csrf_check(proxied: Proxied) -> None:
    """Why the block says ``$http_host``: ``$host`` drops the port, and the CSRF check
    (under HTTPS) then finds that the page's origin is not the request's."""
    usual = readme_server_block().replace("$http_host", "$host")
    assert usual != readme_server_block()
    nginx = Nginx(proxied.server.port, proxied.certificate, proxied.folder / "nginx-host",
                  block=usual).start()  # fmt: skip
    try:
        refused = sign_in(proxied.client(), nginx.base_url, ADMIN_EMAIL, ADMIN_PASSWORD)
    finally:
        nginx.stop()
    assert refused.status_code == 400
    assert "referrer does not match" in refused.text


def test_the_throttle_counts_the_address_nginx_reports_not_a_forged_one(
    proxied: Proxied,
) -> None:
    """Each attempt forges another X-Forwarded-For; nginx appends the real one (::1),
    which is the one the app believes: the sixth attempt is throttled, and the tally is
    kept for ::1 (not nginx's own 127.0.0.1, nor a forged address)."""
    client, base = proxied.client(), proxied.base
    answers = [
        sign_in(client, base, STRANGER, "wrong", **{"X-Forwarded-For": f"198.51.100.{n}"})
        for n in range(6)
    ]
    engine = create_engine(proxied.database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT client_address FROM sign_in_throttles WHERE email = :e"),
                {"e": STRANGER},
            )
            recorded = sorted(str(row[0]) for row in rows)
    finally:
        engine.dispose()
    assert [a.status_code for a in answers] == [401] * 5 + [429]
    assert recorded == ["::1"]
