"""The HTTP POST of one webhook delivery attempt: to a checked address, on the clock.

Each attempt is one fresh connection. The host is resolved once; unless private addresses
are allowed, every address it gives is checked (``domain.webhooks.refusal``) before any
packet is sent, and the connection goes to a checked address: there is no second lookup
for a name to answer differently (DNS rebinding). TLS checks the certificate against the
host's name. An attempt has one deadline, from the connect to the last byte of the
answer: every socket operation waits at most what is left of it, so a receiver that
drips its answer a byte at a time is cut off on the clock, however often it sends.
Redirects are not followed (a 3xx is a failed attempt) and no proxy is used.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from speechbatch.domain.webhooks import refusal

# The contract's limit; tests pass a shorter one.
TIMEOUT_SECONDS = 10.0
# What is read of an answer's body at most: only its status counts.
MAX_ANSWER_BYTES = 64 * 1024

Address = tuple[int, tuple[Any, ...]]  # (family, socket address)


class Refused(Exception):
    """The host resolves to an address webhooks may not reach."""


@dataclass(frozen=True)
class AttemptResult:
    """What one POST came to: delivered (a 2xx), or why not, and the metrics label."""

    delivered: bool
    status_code: int | None
    error: str | None
    label: str


class _Clock:
    """An attempt's deadline; ``left`` raises TimeoutError once it has passed."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the attempt's deadline passed")
        return remaining


class _OnTheClock:
    """A socket whose every read and write waits at most what is left of the attempt."""

    clock: _Clock

    def recv_into(self, *args: Any, **kwargs: Any) -> int:
        self.settimeout(self.clock.left())  # type: ignore[attr-defined]
        received: int = super().recv_into(*args, **kwargs)  # type: ignore[misc]
        return received

    def sendall(self, *args: Any, **kwargs: Any) -> None:
        self.settimeout(self.clock.left())  # type: ignore[attr-defined]
        super().sendall(*args, **kwargs)  # type: ignore[misc]


class _ClockedSocket(_OnTheClock, socket.socket):
    pass


class _ClockedTLSSocket(_OnTheClock, ssl.SSLSocket):
    pass


class _Connection(http.client.HTTPConnection):
    """One connection to addresses already resolved (and checked), on one clock."""

    def __init__(
        self,
        host: str,
        port: int,
        addresses: list[Address],
        clock: _Clock,
        tls: ssl.SSLContext | None,
    ) -> None:
        super().__init__(host, port)
        self._addresses, self._clock, self._tls = addresses, clock, tls

    def connect(self) -> None:
        sock = self._first_that_answers()
        if self._tls is not None:
            sock.settimeout(self._clock.left())
            tls = self._tls.wrap_socket(sock, server_hostname=self.host)
            tls.clock = self._clock  # type: ignore[attr-defined]
            self.sock = tls
        else:
            self.sock = sock

    def _first_that_answers(self) -> _ClockedSocket:
        failure: OSError = OSError("no address to connect to")
        for family, address in self._addresses:
            sock = _ClockedSocket(family, socket.SOCK_STREAM)
            sock.clock = self._clock
            try:
                sock.settimeout(self._clock.left())
                sock.connect(address)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            except OSError as exc:
                sock.close()
                failure = exc
                if isinstance(exc, TimeoutError):
                    break
        raise failure


def resolve(host: str, port: int, allow_private: bool) -> list[Address]:
    """Every address of ``host``, looked up once; Refused if private addresses are not
    allowed and any of them is one (a name that mixes them is refused whole)."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    addresses: list[Address] = [(int(family), tuple(sockaddr)) for family, *_, sockaddr in found]
    if not allow_private:
        for _family, sockaddr in addresses:
            reason = refusal(str(sockaddr[0]))
            if reason is not None:
                raise Refused(
                    f"refused: {host} resolves to {reason}, which webhooks may not reach "
                    "(SPEECHBATCH_WEBHOOK_ALLOW_PRIVATE is off); nothing was sent"
                )
    return addresses


class WebhookHTTP:
    """POSTs deliveries; one per sender thread."""

    def __init__(
        self,
        *,
        allow_private: bool,
        timeout: float = TIMEOUT_SECONDS,
        resolver: Callable[[str, int, bool], list[Address]] = resolve,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._allow_private = allow_private
        self._timeout = timeout
        self._resolve = resolver
        # The system's certificate authorities; tests pass a context that trusts theirs.
        self._tls = tls or ssl.create_default_context()
        self._tls.sslsocket_class = _ClockedTLSSocket

    def post(self, url: str, headers: dict[str, str], body: bytes) -> AttemptResult:
        """POST ``body`` once; never raises for what the receiver or network did."""
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        host, port = parts.hostname or "", parts.port or (443 if tls else 80)
        try:
            addresses = self._resolve(host, port, self._allow_private)
        except Refused as exc:
            return AttemptResult(False, None, str(exc), "forbidden_address")
        except (OSError, UnicodeError) as exc:
            error = f"connection failed: the name {host} does not resolve ({exc})"
            return AttemptResult(False, None, error, "connection_error")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        clock = _Clock(self._timeout)
        connection = _Connection(host, port, addresses, clock, self._tls if tls else None)
        try:
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            code, location = response.status, response.getheader("Location", "")
            response.read(MAX_ANSWER_BYTES)
        except TimeoutError:
            return AttemptResult(False, None, f"timed out after {self._timeout:g} s", "timeout")
        except (OSError, http.client.HTTPException) as exc:
            return AttemptResult(False, None, f"connection failed: {exc}", "connection_error")
        finally:
            connection.close()
        return _result(code, location)

    def close(self) -> None:
        """Nothing to close: every attempt closes its own connection."""


def _result(code: int, location: str) -> AttemptResult:
    if 200 <= code < 300:
        return AttemptResult(True, code, None, "delivered")
    if 300 <= code < 400:
        return AttemptResult(
            False, code, f"HTTP {code}: redirect to {location[:200]} not followed", "redirect"
        )
    return AttemptResult(False, code, f"HTTP {code}", "error_status")
