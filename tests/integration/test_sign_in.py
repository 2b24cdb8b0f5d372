"""Sign-in throttling: 5 failures per email and client address in 15 minutes, in the DB."""

from __future__ import annotations

import logging
import statistics
import threading
import time
from dataclasses import fields

import pytest
from flask import Flask, g
from flask.testing import FlaskClient
from sqlalchemy import select, update
from werkzeug.test import TestResponse

from speechbatch import create_app
from speechbatch.adapters.db import ago
from speechbatch.adapters.models import SignInThrottle
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.config import Settings
from speechbatch.errors import TooManySignIns
from speechbatch.services.accounts import sign_in
from tests.conftest import close_services, services, with_settings
from tests.fakes import FakeProvider
from tests.helpers import concrete
from tests.integration.test_pages import PASSWORD, csrf_from, text_of
from tests.integration.test_pages import sign_in as browser_sign_in

EMAIL = "admin@acme.test"


def attempt(
    client: FlaskClient,
    password: str,
    address: str = "10.0.0.1",
    email: str = EMAIL,
    forwarded_for: str | None = None,
) -> TestResponse:
    """One POST /login from ``address`` (with an X-Forwarded-For header, if given)."""
    data = {"email": email, "password": password, "csrf_token": csrf_from(client)}
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    return client.post("/login", data=data, headers=headers, environ_base={"REMOTE_ADDR": address})


def fail_five_times(client: FlaskClient, address: str = "10.0.0.1") -> None:
    for _ in range(5):
        assert attempt(client, "wrong-password", address).status_code == 401


def test_sixth_attempt_is_429_even_with_the_right_password(
    client: FlaskClient, admin: UserRecord
) -> None:
    fail_five_times(client)
    response = attempt(client, PASSWORD)
    assert response.status_code == 429
    assert 14 * 60 < int(response.headers["Retry-After"]) <= 15 * 60
    assert "Try again in 15 minutes" in text_of(response)
    assert "user_id" not in str(client.get_cookie("session"))


def test_four_failures_still_let_the_right_password_in(
    client: FlaskClient, admin: UserRecord
) -> None:
    for _ in range(4):
        attempt(client, "wrong-password")
    assert attempt(client, PASSWORD).status_code == 302


def test_a_success_clears_the_count(client: FlaskClient, admin: UserRecord) -> None:
    for _ in range(4):
        attempt(client, "wrong-password")
    assert attempt(client, PASSWORD).status_code == 302
    client.post("/logout", data={"csrf_token": csrf_from(client, "/jobs/new")})
    for _ in range(4):
        assert attempt(client, "wrong-password").status_code == 401
    assert attempt(client, PASSWORD).status_code == 302


def test_another_address_is_not_throttled(client: FlaskClient, admin: UserRecord) -> None:
    fail_five_times(client, "10.0.0.1")
    assert attempt(client, PASSWORD, "10.0.0.2").status_code == 302


def test_another_email_is_not_throttled(
    client: FlaskClient, admin: UserRecord, svc: Services
) -> None:
    fail_five_times(client)
    assert attempt(client, "wrong", email="nobody@acme.test").status_code == 401


def test_email_case_does_not_dodge_the_throttle(client: FlaskClient, admin: UserRecord) -> None:
    fail_five_times(client)
    assert attempt(client, PASSWORD, email=EMAIL.upper()).status_code == 429


def test_throttle_ends_with_the_window(
    client: FlaskClient, admin: UserRecord, svc: Services
) -> None:
    fail_five_times(client)
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(update(SignInThrottle).values(window_started_at=ago(15 * 60 + 1)))
        uow.commit()
    assert attempt(client, PASSWORD).status_code == 302


def test_sign_ins_are_logged_without_the_password(
    client: FlaskClient, admin: UserRecord, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="speechbatch.services.accounts")
    attempt(client, "secret-guess-1")
    attempt(client, PASSWORD)
    logged = caplog.text
    assert "sign-in failed" in logged and "sign-in succeeded" in logged
    assert "secret-guess-1" not in logged and PASSWORD not in logged


def test_a_burst_of_guesses_gets_no_more_than_five_tries(
    app: Flask, admin: UserRecord, svc: Services
) -> None:
    # Ten guesses at once, as from ten processes: each attempt is counted before the
    # password is checked, so exactly five are checked and five refused.
    barrier = threading.Barrier(10)
    outcomes: list[str] = []

    def guess() -> None:
        barrier.wait()
        try:
            user = sign_in(svc.uow_factory, EMAIL, "wrong-password", "10.9.9.9")
            outcomes.append("checked" if user is None else "signed in")
        except TooManySignIns:
            outcomes.append("refused")

    threads = [threading.Thread(target=guess) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["checked"] * 5 + ["refused"] * 5


def test_a_success_sweeps_tallies_of_ended_windows(
    client: FlaskClient, admin: UserRecord, svc: Services
) -> None:
    attempt(client, "wrong-password", "10.0.0.7")
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(update(SignInThrottle).values(window_started_at=ago(15 * 60 + 1)))
        uow.commit()
    attempt(client, "wrong-password", "10.0.0.8")
    assert attempt(client, PASSWORD, "10.0.0.9").status_code == 302
    with concrete(svc.uow_factory)() as uow:
        left = uow.session.execute(select(SignInThrottle.client_address)).scalars().all()
    assert left == ["10.0.0.8"]


def test_an_unknown_email_takes_as_long_to_refuse_as_a_wrong_password(
    admin: UserRecord, svc: Services
) -> None:
    # Interleaved, so that both see the same load; medians, so that one slow try on a busy
    # machine does not decide. Skipping the hash would make the unknown email ~20x faster.
    unknown: list[float] = []
    wrong: list[float] = []
    for n in range(5):
        for email, times in (("nobody@acme.test", unknown), (EMAIL, wrong)):
            started = time.perf_counter()
            assert sign_in(svc.uow_factory, email, "wrong-password", f"10.8.0.{n}") is None
            times.append(time.perf_counter() - started)
    assert statistics.median(unknown) > 0.6 * statistics.median(wrong), (unknown, wrong)


def test_the_requests_user_carries_no_password_hash(
    client: FlaskClient, admin: UserRecord, auth: dict[str, str]
) -> None:
    browser_sign_in(client)
    with client:
        assert client.get("/").status_code == 200
        page_user = g.session_user
    api = client.application.test_client()
    with api:
        assert api.get("/api/tokens", headers=auth).status_code == 200
        api_user = g.user
    for user in (page_user, api_user, admin):
        assert user.email == EMAIL
        assert "password_hash" not in {field.name for field in fields(user)}
        assert "scrypt" not in repr(user) and "hash" not in repr(user)


def test_only_the_sign_in_reads_the_password_hash(admin: UserRecord, svc: Services) -> None:
    with svc.uow_factory(read_only=True) as uow:
        credentials = uow.users.get_credentials(EMAIL.upper())
    assert credentials is not None and credentials.user == admin
    assert credentials.password_hash.startswith("scrypt:")
    assert "scrypt" not in repr(credentials)


def test_a_forged_forwarded_for_changes_nothing_without_trusted_proxies(
    client: FlaskClient, admin: UserRecord
) -> None:
    for n in range(5):
        assert attempt(client, "wrong", forwarded_for=f"203.0.113.{n}").status_code == 401
    assert attempt(client, PASSWORD, forwarded_for="198.51.100.1").status_code == 429


def test_behind_a_trusted_proxy_the_reported_client_is_the_key(
    settings: Settings, provider: FakeProvider, admin: UserRecord
) -> None:
    # Two people behind one load balancer (10.0.0.1): one guessing does not lock out the other.
    app = create_app(with_settings(settings, trusted_proxies=1), provider=provider)
    try:
        client = app.test_client()
        for _ in range(5):
            assert attempt(client, "wrong", forwarded_for="203.0.113.7").status_code == 401
        assert attempt(client, PASSWORD, forwarded_for="203.0.113.7").status_code == 429
        # Only the hop the trusted proxy added counts: what a client wrote before it does not.
        forged = "198.51.100.2, 203.0.113.7"
        assert attempt(client, PASSWORD, forwarded_for=forged).status_code == 429
        assert attempt(client, PASSWORD, forwarded_for="198.51.100.1").status_code == 302
    finally:
        close_services(services(app))
