"""The ledger equals what the provider received: an attempt that certainly never left is
refunded; one whose request was written and whose answer was lost is billed and counted
as in doubt.

A local server stands for the provider (tests/support/local_provider.py) and counts the
characters of every request it read in full; per request it answers, resets the
connection right after reading it, or hangs past the client's timeout. A port nobody
listens on refuses connections, and a TLS server whose certificate the client does not
trust fails the handshake.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from speechbatch import create_app
from speechbatch.adapters.providers import RetryableProviderError
from speechbatch.adapters.providers.base import Delivery
from speechbatch.adapters.providers.openai import OpenAIProvider
from speechbatch.adapters.repositories import UserRecord
from speechbatch.config import Settings
from speechbatch.services import create_token, start_generation
from tests.conftest import close_services, services, with_settings
from tests.helpers import new_admin, new_job, view, wait_for
from tests.integration.test_pages import sign_in
from tests.support.certificates import server_context
from tests.support.local_provider import LocalProvider, refusing_url, serving

TIMEOUT = 0.5
Serve = Callable[..., LocalProvider]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start local providers (``serve(mode=...)``); all stop at the test's end."""
    yield from serving()


@pytest.fixture(autouse=True)
def _no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def _delivery(url: str) -> Delivery:
    client = OpenAIProvider(url, "sk-test", "tts-1", ("alloy",), TIMEOUT)
    with pytest.raises(RetryableProviderError) as info:
        client.synthesize("hello there", "alloy")
    return info.value.delivery


def test_a_refused_connection_never_left() -> None:
    assert _delivery(refusing_url()) is Delivery.NOT_SENT


def test_a_failed_tls_handshake_never_left(
    serve: Serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CURL_CA_BUNDLE", "")  # requests' default store: it lacks the cert
    tls, _ = server_context(tmp_path)  # not trusted: the handshake fails
    server = serve(tls)
    assert _delivery(server.url) is Delivery.NOT_SENT
    assert server.paths == []


@pytest.mark.parametrize("mode", ["reset", "hang"])
def test_a_request_written_whose_answer_was_lost_is_in_doubt(serve: Serve, mode: str) -> None:
    server = serve(mode=lambda text: mode, hang_seconds=TIMEOUT * 6)
    assert _delivery(server.url) is Delivery.IN_DOUBT
    assert len(server.paths) == 1


@pytest.fixture
def openai_settings(settings: Settings) -> Settings:
    return with_settings(
        settings, tts_provider="openai", tts_api_key="sk-test", tts_timeout_seconds=TIMEOUT,
        tts_max_attempts=2, item_concurrency=2,
    )  # fmt: skip


def _run_against(settings: Settings, url: str) -> tuple[Flask, UserRecord, dict[str, Any]]:
    """Run a 3-item job against the provider at ``url``: the app, its admin, the ledger."""
    app = create_app(with_settings(settings, tts_base_url=url))
    app.config["TESTING"] = True
    svc = services(app)
    admin = new_admin(svc, "acme", "admin@acme.test")
    job_id = new_job(svc, admin, 3)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: view(svc, admin, job_id)["status"] != "GENERATING", timeout=30)
    with svc.uow_factory(read_only=True) as uow:
        usage = uow.spending.usage(admin.organization_id)
    return app, admin, {"billed": usage.billed_characters, "calls": usage.provider_calls,
                        "in_doubt_calls": usage.in_doubt_calls,
                        "in_doubt_characters": usage.in_doubt_characters}  # fmt: skip


def test_a_provider_that_refuses_connections_bills_nothing(openai_settings: Settings) -> None:
    app, admin, usage = _run_against(openai_settings, refusing_url())
    svc = services(app)
    try:
        assert usage == {"billed": 0, "calls": 0, "in_doubt_calls": 0, "in_doubt_characters": 0}
        job = view(svc, admin, 1)
        assert {i["status"] for i in job["items"]} == {"ERROR"}
        assert "cannot reach provider" in job["items"][0]["error_message"]
    finally:
        close_services(svc)


def test_the_ledger_is_what_the_provider_received_with_lost_answers_in_doubt(
    openai_settings: Settings, serve: Serve
) -> None:
    """Each text's first request is read and then its connection reset (or left
    hanging); the retry is answered. Billed: every character the provider read; in
    doubt: those of the requests whose answers were lost."""
    seen: set[str] = set()
    lock = threading.Lock()

    def first_lost(text: str) -> str:
        with lock:
            fresh = text not in seen
            seen.add(text)
        return ("reset" if text.endswith("1") else "hang") if fresh else "ok"

    server = serve(mode=first_lost, hang_seconds=TIMEOUT * 6)
    app, admin, usage = _run_against(openai_settings, server.url)
    svc = services(app)
    try:
        assert view(svc, admin, 1)["status"] == "COMPLETED"
        lost = sum(len(f"text {n}") for n in (1, 2, 3))
        assert usage["billed"] == server.received == 2 * lost
        assert (usage["in_doubt_calls"], usage["in_doubt_characters"]) == (3, lost)
        assert usage["calls"] == len(server.paths) == 6
        client = app.test_client()
        token = create_token(svc.uow_factory, admin.email)
        body = client.get("/api/usage", headers={"Authorization": f"Bearer {token}"}).get_json()
        assert (body["in_doubt_calls"], body["in_doubt_characters"]) == (3, lost)
        sign_in(client)
        assert "are in doubt" in client.get("/usage").get_data(as_text=True)
    finally:
        close_services(svc)
