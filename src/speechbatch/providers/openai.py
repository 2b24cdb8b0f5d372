"""Any OpenAI-compatible HTTP text-to-speech API (``POST {base}/audio/speech``)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from email.utils import parsedate_to_datetime
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from requests.models import PreparedRequest, Response
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from .base import PermanentProviderError, RetryableProviderError, check_send_guard

_MAX_MESSAGE = 500
# A kept session idle longer than this is replaced (see _SessionPool): well under the idle
# timeouts of common load balancers and NATs (60-350 s).
SESSION_MAX_IDLE_SECONDS = 30.0


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date), or None."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP-date is always GMT
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


class _GuardsItsSend:
    """Runs the send guard as the request's very last step: urllib3 has taken (or opened)
    the connection and put the request line and headers together; the next thing
    ``endheaders`` does is write them to the socket. (For HTTPS the TLS handshake, at
    connect, sends nothing billable.)"""

    def endheaders(self, message_body: Any = None, *, encode_chunked: bool = False) -> None:
        check_send_guard()
        super().endheaders(message_body, encode_chunked=encode_chunked)  # type: ignore[misc]


class _GuardedHTTPConnection(_GuardsItsSend, HTTPConnection):
    pass


class _GuardedHTTPSConnection(_GuardsItsSend, HTTPSConnection):
    pass


class _GuardedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


class _GuardedAdapter(HTTPAdapter):
    """Runs the send guard twice: once when requests hands the prepared request over
    (every route, proxies included), and once more in the connection itself, right
    before the request's bytes are written (direct connections, the usual route).

    The second check closes the window between the two: urllib3 taking a connection
    from its pool and building the request line and headers. A process frozen there
    and woken after its run was taken over would otherwise still send a paid call.
    """

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _GuardedHTTPPool,
            "https": _GuardedHTTPSPool,
        }

    def send(self, request: PreparedRequest, *args: Any, **kwargs: Any) -> Response:
        check_send_guard()
        return super().send(request, *args, **kwargs)


class _SessionPool:
    """Sessions lent to one thread at a time, kept (with their open connections) between
    calls and between runs.

    A run's item threads end with the run; a session per thread died with them, so every
    run opened its connections (a TLS handshake each, for a real provider) again on its
    first calls. Lent last-in first-out, so the sessions in use stay the warm ones, and
    never to two threads at once: a session is not thread-safe. A session idle longer
    than ``max_idle_seconds`` is closed rather than lent: a connection that a load
    balancer dropped without a word would swallow the next request until its timeout
    (urllib3 only notices a connection that the server closed properly).
    """

    def __init__(
        self,
        make: Callable[[], requests.Session],
        max_idle_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._make = make
        self._max_idle = max_idle_seconds
        self._clock = clock
        self._idle: list[tuple[requests.Session, float]] = []  # (session, given back at)
        self._lock = threading.Lock()

    def _take(self) -> requests.Session | None:
        now = self._clock()
        with self._lock:
            # Oldest first in the list: once the newest is too old, so are all.
            if self._idle and now - self._idle[-1][1] > self._max_idle:
                stale, self._idle = self._idle, []
            else:
                stale = []
            session = self._idle.pop()[0] if self._idle else None
        for old, _ in stale:
            old.close()
        return session

    @contextmanager
    def lend(self) -> Iterator[requests.Session]:
        """A session of this pool's (a new one when none is idle), back when done."""
        session = self._take() or self._make()
        try:
            yield session
        finally:
            with self._lock:
                self._idle.append((session, self._clock()))


class OpenAIProvider:
    """One billed HTTP call per ``synthesize``; 429/5xx/timeouts are retryable, other 4xx not.

    Each call borrows a ``requests.Session`` from a pool (sessions are not thread-safe;
    kept alive, they save a TLS handshake per item and per run). The API key is never
    put in a message or repr.
    """

    name = "openai"
    max_chars = 4096
    content_type = "audio/mpeg"
    file_extension = "mp3"

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        voices: Sequence[str],
        timeout_seconds: float,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/audio/speech"
        self._api_key = api_key or None
        self.model = model
        self.voices: tuple[str, ...] = tuple(voices)
        self.timeout_seconds = timeout_seconds
        self._sessions = _SessionPool(self._new_session, SESSION_MAX_IDLE_SECONDS)

    def __repr__(self) -> str:
        return (
            f"OpenAIProvider(base_url={self.base_url!r}, model={self.model!r}, "
            f"voices={self.voices!r}, timeout_seconds={self.timeout_seconds!r})"
        )

    def _new_session(self) -> requests.Session:
        session = requests.Session()
        # What requests reads from the environment at every call (trust_env: the proxy
        # variables, walking all of os.environ twice; ~/.netrc; the CA bundle) is read
        # once per session here: 0.17 ms of the interpreter's time per call less. A
        # ~/.netrc entry for the provider's host no longer replaces the API key either.
        session.trust_env = False
        session.proxies = requests.utils.get_environ_proxies(self.url)
        session.verify = (
            os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
        )
        adapter = _GuardedAdapter()
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        if self._api_key is not None:
            session.headers["Authorization"] = f"Bearer {self._api_key}"
        return session

    def _scrub(self, message: str) -> str:
        # Belt and braces: a provider or an exception could echo the key back.
        if self._api_key:
            message = message.replace(self._api_key, "***")
        return message

    def synthesize(self, text: str, voice: str) -> bytes:
        """POST the text once and return the MP3 bytes, or raise a ProviderError."""
        if voice not in self.voices:
            raise PermanentProviderError(f"unknown voice {voice!r} for provider openai")
        body = {"model": self.model, "input": text, "voice": voice, "response_format": "mp3"}
        try:
            with self._sessions.lend() as session:
                response = session.post(self.url, json=body, timeout=self.timeout_seconds)
        except requests.Timeout as exc:
            raise RetryableProviderError(
                self._scrub(f"provider timed out after {self.timeout_seconds:g} s")
            ) from exc
        except requests.ConnectionError as exc:
            raise RetryableProviderError(
                self._scrub(f"cannot reach provider: {type(exc).__name__}")
            ) from exc
        except requests.exceptions.ChunkedEncodingError as exc:
            # The answer broke off mid-body: a transient network fault, not a bad request.
            raise RetryableProviderError("provider answer was cut off") from exc
        except requests.RequestException as exc:
            raise PermanentProviderError(
                self._scrub(f"provider request failed: {type(exc).__name__}: {exc}")
            ) from exc
        status = response.status_code
        if status == 200:
            if not response.content:
                raise RetryableProviderError("empty audio", status)
            return response.content
        message = self._scrub(f"provider answered {status}: {self._error_message(response)}")
        if status == 429 or status >= 500:
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            raise RetryableProviderError(message, status, retry_after)
        raise PermanentProviderError(message, status)

    @staticmethod
    def _error_message(response: requests.Response) -> str:
        """The provider's own message: ``{"error": {"message": ...}}`` if present, else the text."""
        text = response.text
        try:
            payload = json.loads(text)
        except ValueError:
            payload = None
        if isinstance(payload, dict):
            error = payload.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                text = error["message"]
            elif isinstance(error, str):
                text = error
        text = " ".join(text.split()) or (response.reason or "no message")
        return text[:_MAX_MESSAGE]
