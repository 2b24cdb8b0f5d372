"""The HTTP provider's transport: the send guard's last check, and whether a failed
request ever left this machine.

A failed call is billed unless its request certainly never reached the provider. The
connections here say how far a request of this thread got: a failure while connecting
(TCP, a name lookup, the TLS handshake, a proxy's CONNECT) sent nothing of it; a failure
once it began to write (a reset, a timeout waiting for the answer) may have been
received, and is in doubt. Exception types alone cannot tell them apart (urllib3 raises
the same ``SSLError`` for a handshake and for a record broken while reading the answer).
"""

from __future__ import annotations

import threading
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.models import PreparedRequest, Response
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import NewConnectionError

from speechbatch.adapters.providers.base import Delivery, check_send_guard

# How far this thread's request got: None (no connection of ours reached), connecting,
# writing (from the first byte of the request on).
_CONNECTING, _WRITING = "connecting", "writing"


class _Progress(threading.local):
    phase: str | None = None


_progress = _Progress()


class _Tracked:
    """A connection that records how far this thread's request got (see the module)."""

    sock: Any

    def connect(self) -> None:
        _progress.phase = _CONNECTING
        super().connect()  # type: ignore[misc]

    def request(self, *args: Any, **kwargs: Any) -> None:
        # http.client would connect lazily at the first write: connect first, so that
        # a failure to connect is never taken for a failure to write.
        if self.sock is None:
            self.connect()
        super().request(*args, **kwargs)  # type: ignore[misc]

    def endheaders(self, *args: Any, **kwargs: Any) -> None:
        # The first byte of the request leaves here. The guard runs once more, so that a
        # process frozen after the adapter's check (taking or opening the connection,
        # building the headers) meets its fence on waking instead of paying for a call.
        check_send_guard()
        _progress.phase = _WRITING
        super().endheaders(*args, **kwargs)  # type: ignore[misc]


class _TrackedHTTPConnection(_Tracked, HTTPConnection):
    pass


class _TrackedHTTPSConnection(_Tracked, HTTPSConnection):
    pass


class _TrackedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _TrackedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


_POOLS = {"http": _TrackedHTTPPool, "https": _TrackedHTTPSPool}


class GuardedAdapter(HTTPAdapter):
    """Runs the send guard (``base.guarded``) when requests hands a prepared request to
    its transport, after it has resolved proxies, CA bundle and auth: the last step of
    ours before urllib3 takes a connection, so a refused call opens none. Its connections
    (direct or through an HTTP proxy) run the guard again right before the request's
    first byte is written, and record how far each request got. What remains after that
    check is the write itself, which only the provider could fence."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if isinstance(manager, urllib3.ProxyManager):  # not SOCKS: judged by type below
            manager.pool_classes_by_scheme = _POOLS
        return manager

    def send(self, request: PreparedRequest, *args: Any, **kwargs: Any) -> Response:
        check_send_guard()
        _progress.phase = None
        return super().send(request, *args, **kwargs)


def delivery_of(error: requests.RequestException) -> Delivery:
    """Whether the request of this thread's failed call may have reached the provider."""
    if _progress.phase == _WRITING:
        return Delivery.IN_DOUBT
    if _progress.phase == _CONNECTING:
        return Delivery.NOT_SENT
    # No connection of ours was reached (a SOCKS proxy's): only a failed connect is sure.
    reason = getattr(error.args[0] if error.args else None, "reason", None)
    if isinstance(error, requests.ConnectTimeout) or isinstance(reason, NewConnectionError):
        return Delivery.NOT_SENT
    return Delivery.IN_DOUBT
