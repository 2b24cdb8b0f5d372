"""One webhook attempt on the wire, over loopback only: no packet to a refused address,
one lookup and a connection to what it gave, and one deadline for the whole answer however
slowly a receiver drips it (plain HTTP and TLS)."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from speechbatch.adapters.webhook_http import Address, WebhookHTTP, resolve
from tests.support.certificates import self_signed
from tests.support.raw_listeners import ConnectionCounter, DripReceiver
from tests.support.webhook_receiver import Receiver

BODY = b'{"type": "ping"}'
HEADERS = {"Content-Type": "application/json"}


@pytest.fixture
def counter() -> Iterator[ConnectionCounter]:
    listener = ConnectionCounter()
    yield listener
    listener.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_refused_address_gets_no_packet(counter: ConnectionCounter, host: str) -> None:
    result = WebhookHTTP(allow_private=False, timeout=1).post(
        f"http://{host}:{counter.port}/hook", HEADERS, BODY
    )
    assert result.label == "forbidden_address" and not result.delivered
    assert result.error is not None and "127.0.0.1, a loopback address" in result.error
    assert "SPEECHBATCH_WEBHOOK_ALLOW_PRIVATE" in result.error
    assert not counter.connected()  # not even a TCP handshake


def test_an_ipv6_loopback_literal_gets_no_packet() -> None:
    counter = ConnectionCounter("::1")
    try:
        result = WebhookHTTP(allow_private=False, timeout=1).post(
            f"http://[::1]:{counter.port}/hook", HEADERS, BODY
        )
        assert result.label == "forbidden_address"
        assert not counter.connected()
    finally:
        counter.close()


def test_private_addresses_are_reached_when_allowed() -> None:
    receiver = Receiver()
    try:
        result = WebhookHTTP(allow_private=True, timeout=2).post(
            f"http://localhost:{receiver.port}/hook", HEADERS, BODY
        )
        assert result.delivered and result.status_code == 200
        assert receiver.count() == 1
    finally:
        receiver.stop()


def test_the_name_is_looked_up_once_and_the_connection_goes_to_its_address() -> None:
    # A name no resolver knows: only the lookup the check made can have reached it.
    receiver = Receiver()
    lookups: list[str] = []

    def one_lookup(host: str, port: int, allow_private: bool) -> list[Address]:
        lookups.append(host)
        return resolve("127.0.0.1", port, allow_private)

    try:
        http = WebhookHTTP(allow_private=True, timeout=2, resolver=one_lookup)
        result = http.post(f"http://receiver.invalid:{receiver.port}/hook", HEADERS, BODY)
        assert result.delivered, result
        assert lookups == ["receiver.invalid"]
        assert receiver.received[0].headers["Host"] == f"receiver.invalid:{receiver.port}"
    finally:
        receiver.stop()


def test_a_name_that_does_not_resolve_fails_the_attempt() -> None:
    # The failed lookup is played by a resolver: a real one would ask a DNS server.
    def unknown(host: str, port: int, allow_private: bool) -> list[Address]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    result = WebhookHTTP(allow_private=False, timeout=1, resolver=unknown).post(
        "http://receiver.invalid/hook", HEADERS, BODY
    )
    assert result.label == "connection_error" and "does not resolve" in (result.error or "")


DEADLINE = 1.0
DRIP = 0.15  # a byte every 0.15 s: the answer takes about 10 s


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


def _contexts(certificate: tuple[Path, Path]) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    cert, key = certificate
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    return server, client


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_dripping_answer_is_cut_off_at_the_deadline(
    certificate: tuple[Path, Path], scheme: str
) -> None:
    server, client = _contexts(certificate)
    receiver = DripReceiver(DRIP, tls=server if scheme == "https" else None)
    assert receiver.seconds_to_answer() > 5 * DEADLINE
    try:
        http = WebhookHTTP(allow_private=True, timeout=DEADLINE, tls=client)
        started = time.monotonic()
        result = http.post(f"{scheme}://localhost:{receiver.port}/hook", HEADERS, BODY)
        elapsed = time.monotonic() - started
        assert result.label == "timeout" and not result.delivered, result
        assert elapsed < DEADLINE + 0.5
    finally:
        receiver.stop()


@pytest.fixture
def tls_receiver(
    certificate: tuple[Path, Path],
) -> Iterator[tuple[DripReceiver, ssl.SSLContext]]:
    """A TLS receiver that answers at once, and a client context that trusts it."""
    server, client = _contexts(certificate)
    receiver = DripReceiver(0.0, tls=server)
    yield receiver, client
    receiver.stop()


def test_an_answer_within_the_deadline_over_tls_is_delivered(
    tls_receiver: tuple[DripReceiver, ssl.SSLContext],
) -> None:
    receiver, client = tls_receiver
    http = WebhookHTTP(allow_private=True, timeout=2, tls=client)
    result = http.post(f"https://localhost:{receiver.port}/hook", HEADERS, BODY)
    assert result.delivered and result.status_code == 200, result


def test_a_certificate_for_another_name_fails_the_attempt(
    tls_receiver: tuple[DripReceiver, ssl.SSLContext],
) -> None:
    receiver, client = tls_receiver

    def other_name(host: str, port: int, allow_private: bool) -> list[Address]:
        return [(socket.AF_INET, ("127.0.0.1", port))]

    http = WebhookHTTP(allow_private=True, timeout=2, tls=client, resolver=other_name)
    result = http.post(f"https://receiver.invalid:{receiver.port}/hook", HEADERS, BODY)
    assert result.label == "connection_error" and not result.delivered
