"""OpenAIProvider over real sockets: its connections, the send guard, TLS and proxies.

A small local server stands for the provider (and, in one test, for a proxy): it counts
the TCP connections it accepted and the requests it answered, so what the client did is
seen from the outside.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from speechbatch.adapters.providers import RetryableProviderError
from speechbatch.adapters.providers.base import CallNotSent, guarded
from speechbatch.adapters.providers.openai import OpenAIProvider
from tests.support.certificates import server_context
from tests.support.local_provider import AUDIO, LocalProvider, serving

Serve = Callable[..., LocalProvider]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start servers for the test (``serve(tls, together)``); all stop at its end."""
    yield from serving()


@pytest.fixture
def tls_server_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A self-signed certificate for 127.0.0.1 (openssl), trusted through the environment."""
    context, cert = server_context(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    return context


@pytest.fixture(autouse=True)
def _no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def provider(url: str, idle: float = 30.0) -> OpenAIProvider:
    return OpenAIProvider(url, "sk-test", "tts-1", ("alloy",), 5.0, session_max_idle_seconds=idle)


def in_threads(n: int, call: Callable[[], bytes]) -> list[bytes]:
    """Run ``call()`` in ``n`` threads at once; their answers."""
    answers: list[bytes] = []
    threads = [threading.Thread(target=lambda: answers.append(call())) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return answers


def test_a_thread_keeps_its_connection_between_calls(serve: Serve) -> None:
    server = serve()
    client = provider(server.url)
    for _ in range(3):
        assert client.synthesize("hi", "alloy") == AUDIO
    assert (server.connections, len(server.paths)) == (1, 3)


def test_calls_in_flight_together_never_share_a_connection(serve: Serve) -> None:
    server = serve(together=3)
    client = provider(server.url)
    assert in_threads(3, lambda: client.synthesize("hi", "alloy")) == [AUDIO] * 3
    assert (server.connections, len(server.paths)) == (3, 3)


def test_a_connection_idle_too_long_is_replaced(serve: Serve) -> None:
    server = serve()
    client = provider(server.url, idle=0.0)
    for _ in range(2):
        assert client.synthesize("hi", "alloy") == AUDIO
    assert (server.connections, len(server.paths)) == (2, 2)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_refusing_send_guard_sends_nothing(
    serve: Serve, scheme: str, request: pytest.FixtureRequest
) -> None:
    """The guard runs first in the transport, before any connection is opened or used; a
    refusal raises CallNotSent and the server sees nothing. The next call is sent."""
    tls = request.getfixturevalue("tls_server_context") if scheme == "https" else None
    server = serve(tls)
    client = provider(server.url)
    checks: list[str] = []

    def refuse() -> None:
        checks.append("refused")
        raise CallNotSent()

    with guarded(refuse), pytest.raises(CallNotSent):
        client.synthesize("hi", "alloy")
    assert checks == ["refused"]
    assert (server.connections, server.paths) == (0, [])
    with guarded(lambda: checks.append("passed")):
        assert client.synthesize("hi", "alloy") == AUDIO
    assert checks == ["refused", "passed", "passed"]  # the adapter, then the connection
    assert len(server.paths) == 1


def test_the_guard_runs_again_on_the_open_connection_right_before_the_first_byte(
    serve: Serve,
) -> None:
    """A process frozen between the adapter's check and the write (SIGSTOP while a
    connection is taken or opened) wakes with its fence lost: the second check, on the
    open connection, refuses, and the provider receives no request."""
    server = serve()
    client = provider(server.url)
    seen: list[int] = []

    def passes_once() -> None:
        if seen:  # the connection is open: the server accepts it (in its own thread)
            deadline = time.monotonic() + 5.0
            while server.connections == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
        seen.append(server.connections)
        if len(seen) > 1:
            raise CallNotSent()

    with guarded(passes_once), pytest.raises(CallNotSent):
        client.synthesize("hi", "alloy")
    assert seen == [0, 1]  # the second check ran with the connection open
    assert server.paths == []
    assert client.synthesize("hi", "alloy") == AUDIO
    assert len(server.paths) == 1


def test_the_environments_ca_bundle_is_trusted(
    serve: Serve,
    tls_server_context: ssl.SSLContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve(tls_server_context)
    assert provider(server.url).synthesize("hi", "alloy") == AUDIO
    monkeypatch.delenv("REQUESTS_CA_BUNDLE")
    monkeypatch.setenv("CURL_CA_BUNDLE", "")  # requests' default store: it lacks our cert
    with pytest.raises(RetryableProviderError, match="SSLError"):
        provider(server.url).synthesize("hi", "alloy")


def test_the_environments_proxy_carries_the_call_and_the_guard_still_runs(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = serve()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
    client = provider("http://tts.example.test/v1")

    def refuse() -> None:
        raise CallNotSent()

    with guarded(refuse), pytest.raises(CallNotSent):
        client.synthesize("hi", "alloy")
    assert proxy.paths == []
    assert client.synthesize("hi", "alloy") == AUDIO
    assert proxy.paths == ["http://tts.example.test/v1/audio/speech"]
