"""The HTTP POST of one webhook delivery attempt.

Redirects are not followed (a 3xx is a failed attempt) and the proxy settings of the
environment are ignored. Unless private addresses are allowed, the address a connection
actually reached is checked after the TCP connect and before a byte is sent (the TLS
handshake included): a loopback, private, link-local or unspecified peer closes the
socket and fails the attempt. The check is on the connected socket's peer, not on a
lookup made beforehand, so a name that resolves differently between a check and the
connection (DNS rebinding) cannot get through.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from speechbatch.domain.webhooks import forbidden_address

# The contract's limit; tests pass a shorter one.
TIMEOUT_SECONDS = 10.0


class ForbiddenAddress(Exception):
    """The connection reached an address webhooks may not reach."""


@dataclass(frozen=True)
class AttemptResult:
    """What one POST came to: delivered (a 2xx), or why not, and the metrics label."""

    delivered: bool
    status_code: int | None
    error: str | None
    label: str


class _PeerChecked:
    """A connection that refuses a forbidden peer right after the TCP connect."""

    def _new_conn(self) -> socket.socket:
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        peer = sock.getpeername()[0]
        if forbidden_address(peer):
            sock.close()
            raise ForbiddenAddress(
                f"refused: {getattr(self, 'host', '?')} connected to {peer}, a loopback, "
                "private, link-local or unspecified address (SPEECHBATCH_WEBHOOK_ALLOW_PRIVATE "
                "is off)"
            )
        return sock


class _CheckedHTTPConnection(_PeerChecked, HTTPConnection):
    pass


class _CheckedHTTPSConnection(_PeerChecked, HTTPSConnection):
    pass


class _CheckedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _CheckedHTTPConnection


class _CheckedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _CheckedHTTPSConnection


class WebhookHTTP:
    """POSTs deliveries; one per sender thread (its own connection pool)."""

    def __init__(self, *, allow_private: bool, timeout: float = TIMEOUT_SECONDS) -> None:
        self._timeout = timeout
        # No retries (the schedule retries), no redirects, no proxy from the environment.
        self._pool = urllib3.PoolManager(
            num_pools=20, retries=False, timeout=urllib3.Timeout(connect=timeout, read=timeout)
        )
        if not allow_private:
            self._pool.pool_classes_by_scheme = {
                "http": _CheckedHTTPPool,
                "https": _CheckedHTTPSPool,
            }

    def post(self, url: str, headers: dict[str, str], body: bytes) -> AttemptResult:
        """POST ``body`` once; never raises for what the receiver or network did."""
        try:
            response = self._pool.request(
                "POST", url, body=body, headers=headers, redirect=False, preload_content=False
            )
            code = response.status
            location = response.headers.get("Location", "")
            response.drain_conn()
            response.release_conn()
        except ForbiddenAddress as exc:
            return AttemptResult(False, None, str(exc), "forbidden_address")
        except urllib3.exceptions.NewConnectionError as exc:
            # Refused, unreachable, or a name that does not resolve (urllib3 makes this
            # a subclass of its connect timeout, so it is told apart first).
            return AttemptResult(False, None, f"connection failed: {exc}", "connection_error")
        except (urllib3.exceptions.TimeoutError, TimeoutError):
            return AttemptResult(False, None, f"timed out after {self._timeout:g} s", "timeout")
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            if isinstance(_root(exc), ForbiddenAddress):
                return AttemptResult(False, None, str(_root(exc)), "forbidden_address")
            return AttemptResult(False, None, f"connection failed: {exc}", "connection_error")
        if 200 <= code < 300:
            return AttemptResult(True, code, None, "delivered")
        if 300 <= code < 400:
            return AttemptResult(
                False, code, f"HTTP {code}: redirect to {location[:200]} not followed", "redirect"
            )
        return AttemptResult(False, code, f"HTTP {code}", "error_status")

    def close(self) -> None:
        """Close the pooled connections."""
        self._pool.clear()


def _root(exc: BaseException) -> BaseException:
    """The innermost cause or context of an exception."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or exc.__context__
        if nxt is None:
            break
        exc = nxt
    return exc
