"""Any OpenAI-compatible HTTP text-to-speech API (``POST {base}/audio/speech``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from email.utils import parsedate_to_datetime
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from requests.auth import AuthBase
from requests.models import PreparedRequest, Response

from speechbatch.adapters.providers.base import (
    PermanentProviderError,
    RetryableProviderError,
    check_send_guard,
)

_MAX_MESSAGE = 500
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


class _GuardedAdapter(HTTPAdapter):
    """Runs the send guard (``base.guarded``) when requests hands a prepared request to
    its transport, after it has resolved proxies, CA bundle and auth: the last step of
    ours before urllib3 takes a connection and writes. What remains after the check is
    urllib3's own work (taking or opening the connection, writing the request), which
    only the provider could fence (by refusing a stale token)."""

    def send(self, request: PreparedRequest, *args: Any, **kwargs: Any) -> Response:
        check_send_guard()
        return super().send(request, *args, **kwargs)


class _BearerAuth(AuthBase):
    """The API key as a bearer token. Given as the session's auth, it also keeps requests
    from replacing it with a ``~/.netrc`` entry for the provider's host."""

    def __init__(self, api_key: str) -> None:
        self._api_key = api_key

    def __call__(self, request: PreparedRequest) -> PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self._api_key}"
        return request

    def __repr__(self) -> str:
        return "_BearerAuth(***)"


class _ThreadSession(threading.local):
    """Each thread's own session (a session is not thread-safe) and when it was last used."""

    session: requests.Session | None = None
    last_used = 0.0


class OpenAIProvider:
    """One billed HTTP call per ``synthesize``; 429/5xx/timeouts are retryable, other 4xx not.

    A plain ``requests`` client: the proxy variables, ``NO_PROXY`` and the CA bundle
    (``REQUESTS_CA_BUNDLE``) come from the environment as requests reads them. Each
    thread keeps its own session, and with it a kept-alive connection (one TLS handshake
    per thread, not per item), replaced after ``session_max_idle_seconds`` unused. The
    API key is never put in a message or repr.
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
        *,
        session_max_idle_seconds: float = SESSION_MAX_IDLE_SECONDS,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/audio/speech"
        self._api_key = api_key or None
        self.model = model
        self.voices: tuple[str, ...] = tuple(voices)
        self.timeout_seconds = timeout_seconds
        self.session_max_idle_seconds = session_max_idle_seconds
        self._local = _ThreadSession()

    def __repr__(self) -> str:
        return (
            f"OpenAIProvider(base_url={self.base_url!r}, model={self.model!r}, "
            f"voices={self.voices!r}, timeout_seconds={self.timeout_seconds!r})"
        )

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
            adapter = _GuardedAdapter()
            session.mount("https://", adapter)
            session.mount("http://", adapter)
            if self._api_key is not None:
                session.auth = _BearerAuth(self._api_key)
            local.session = session
        return local.session

    def _scrub(self, message: str) -> str:
        # Belt and braces: a provider or an exception could echo the key back.
        if self._api_key:
            message = message.replace(self._api_key, "***")
        return message

    def _post(self, body: dict[str, Any]) -> Response:
        """Send the request once; a transport failure becomes a ProviderError."""
        try:
            return self._session().post(self.url, json=body, timeout=self.timeout_seconds)
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
        finally:
            self._local.last_used = time.monotonic()

    def synthesize(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> bytes:
        """POST the text once and return the MP3 bytes, or raise a ProviderError."""
        if voice not in self.voices:
            raise PermanentProviderError(f"unknown voice {voice!r} for provider openai")
        body: dict[str, Any] = {
            "model": self.model,
            "input": text,
            "voice": voice,
            "response_format": "mp3",
        }
        # Sent only when the job sets them, as the API's defaults are what "unset" means.
        for name in ("speed", "instructions"):
            if options and options.get(name) is not None:
                body[name] = options[name]
        response = self._post(body)
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
