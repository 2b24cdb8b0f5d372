"""The HTTP providers' client: one session per thread on the guarded transport, a call's
failure told apart by how far its request got, and the provider's answer mapped to the
errors every provider shares (``base.error_for_status``).

A plain ``requests`` client: the proxy variables, ``NO_PROXY`` and the CA bundle
(``REQUESTS_CA_BUNDLE``) come from the environment as requests reads them. Each thread
keeps its own session, and with it a kept-alive connection (one TLS handshake per thread,
not per item), replaced after ``session_max_idle_seconds`` unused. Secrets given to the
client are never put in a message.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import requests
from requests.auth import AuthBase
from requests.models import Response

from speechbatch.adapters.providers.base import (
    Delivery,
    PermanentProviderError,
    ProviderError,
    RetryableProviderError,
    error_for_status,
)
from speechbatch.adapters.providers.transport import GuardedAdapter, delivery_of

MAX_MESSAGE = 500
# A thread's session idle longer than this is replaced: a connection that a load balancer
# or NAT dropped without a word (common idle timeouts: 60-350 s) would otherwise swallow
# the next request until its timeout; urllib3 only notices a connection closed properly.
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


def provider_message(response: Response, find: Callable[[Any], str | None] | None = None) -> str:
    """The provider's own message of an error answer: what ``find`` picks from its JSON
    (by default ``{"error": {"message"}}`` or ``{"error": str}``), else its text."""
    text = response.text
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    found = (find or _openai_message)(payload) if payload is not None else None
    if found:
        text = found
    text = " ".join(text.split()) or (response.reason or "no message")
    return text[:MAX_MESSAGE]


def _openai_message(payload: Any) -> str | None:
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return None


class _ThreadSession(threading.local):
    """Each thread's own session (a session is not thread-safe) and when it was last used."""

    session: requests.Session | None = None
    last_used = 0.0


class HttpClient:
    """Sends one request at a time per thread and maps its failure (see the module)."""

    def __init__(
        self,
        timeout_seconds: float,
        *,
        auth: AuthBase | None = None,
        secrets: tuple[str | None, ...] = (),
        session_max_idle_seconds: float = SESSION_MAX_IDLE_SECONDS,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.session_max_idle_seconds = session_max_idle_seconds
        self._auth = auth
        self._secrets = tuple(s for s in secrets if s)
        self._local = _ThreadSession()

    def __repr__(self) -> str:
        return f"HttpClient(timeout_seconds={self.timeout_seconds!r})"

    def _session(self) -> requests.Session:
        """This thread's session: a new one at first, or after it sat idle too long."""
        local = self._local
        if (
            local.session is not None
            and time.monotonic() - local.last_used > self.session_max_idle_seconds
        ):
            local.session.close()
            local.session = None
        if local.session is None:
            session = requests.Session()
            adapter = GuardedAdapter()
            session.mount("https://", adapter)
            session.mount("http://", adapter)
            if self._auth is not None:
                # Given as the session's auth, it also keeps requests from replacing it
                # with a ``~/.netrc`` entry for the provider's host.
                session.auth = self._auth
            local.session = session
        return local.session

    def scrub(self, message: str) -> str:
        """``message`` without any secret (a provider or an exception could echo one)."""
        for secret in self._secrets:
            message = message.replace(secret, "***")
        return message

    def send(self, method: str, url: str, **kwargs: Any) -> Response:
        """Send the request once; a transport failure becomes a ProviderError that says
        whether the request may have reached the provider (``transport.delivery_of``)."""
        try:
            return self._session().request(method, url, timeout=self.timeout_seconds, **kwargs)
        except requests.RequestException as exc:
            raise self._failure(exc, delivery_of(exc)) from exc
        finally:
            self._local.last_used = time.monotonic()

    def call(
        self,
        method: str,
        url: str,
        *,
        find_message: Callable[[Any], str | None] | None = None,
        **kwargs: Any,
    ) -> Response:
        """Send once and answer a 2xx; any other answer raises its mapped error with the
        provider's message (``find_message`` picks it from the error's JSON)."""
        response = self.send(method, url, **kwargs)
        status = response.status_code
        if 200 <= status < 300:
            return response
        message = self.scrub(
            f"provider answered {status}: {provider_message(response, find_message)}"
        )
        raise error_for_status(
            status, message, parse_retry_after(response.headers.get("Retry-After"))
        )

    def get_json(self, url: str, **kwargs: Any) -> Any:
        """GET a JSON document (a voices list), or raise a ProviderError."""
        response = self.call("GET", url, **kwargs)
        try:
            return response.json()
        except ValueError as exc:
            raise RetryableProviderError("provider answered with invalid JSON", 200) from exc

    def _failure(self, exc: requests.RequestException, delivery: Delivery) -> ProviderError:
        if isinstance(exc, requests.Timeout):
            if delivery is Delivery.NOT_SENT:
                return RetryableProviderError(
                    self.scrub(f"cannot reach provider: connect timed out after "
                               f"{self.timeout_seconds:g} s"), delivery=delivery,
                )  # fmt: skip
            return RetryableProviderError(
                self.scrub(f"provider timed out after {self.timeout_seconds:g} s"),
                delivery=delivery,
            )
        if isinstance(exc, requests.ConnectionError):
            what = "cannot reach provider" if delivery is Delivery.NOT_SENT else "connection lost"
            return RetryableProviderError(
                self.scrub(f"{what}: {type(exc).__name__}"), delivery=delivery
            )
        if isinstance(exc, requests.exceptions.ChunkedEncodingError):
            # The answer broke off mid-body: a transient network fault, not a bad request.
            return RetryableProviderError("provider answer was cut off", delivery=delivery)
        return PermanentProviderError(
            self.scrub(f"provider request failed: {type(exc).__name__}: {exc}"),
            delivery=delivery,
        )


def json_body(response: Response, *fields: str) -> Mapping[str, Any]:
    """A 200's JSON object that has ``fields``; a malformed one is retryable (a broken
    answer, not a bad request)."""
    try:
        payload = response.json()
    except ValueError as exc:
        raise RetryableProviderError("provider answered with invalid JSON", 200) from exc
    if not isinstance(payload, dict) or any(f not in payload for f in fields):
        raise RetryableProviderError(f"provider answer lacks {', '.join(fields)}", 200)
    return payload
