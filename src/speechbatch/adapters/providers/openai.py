"""Any OpenAI-compatible HTTP text-to-speech API (``POST {base}/audio/speech``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from requests.auth import AuthBase
from requests.models import PreparedRequest

from speechbatch.adapters.providers.base import (
    CharacterBilled,
    PermanentProviderError,
    RetryableProviderError,
)
from speechbatch.adapters.providers.http import (
    SESSION_MAX_IDLE_SECONDS,
    HttpClient,
    parse_retry_after,
)

__all__ = ["OpenAIProvider", "parse_retry_after"]


class _BearerAuth(AuthBase):
    """The API key as a bearer token."""

    def __init__(self, api_key: str) -> None:
        self._api_key = api_key

    def __call__(self, request: PreparedRequest) -> PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self._api_key}"
        return request

    def __repr__(self) -> str:
        return "_BearerAuth(***)"


class OpenAIProvider(CharacterBilled):
    """One billed HTTP call per ``synthesize``; 429/5xx/timeouts are retryable, 401/403
    a refused key, other 4xx permanent. The session, proxies and the guarded transport
    are ``http.HttpClient``'s. The API key is never put in a message or repr.
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
        api_key = api_key or None
        self.model = model
        self.voices: tuple[str, ...] = tuple(voices)
        self.timeout_seconds = timeout_seconds
        self.http = HttpClient(
            timeout_seconds,
            auth=_BearerAuth(api_key) if api_key else None,
            secrets=(api_key,),
            session_max_idle_seconds=session_max_idle_seconds,
        )

    def __repr__(self) -> str:
        return (
            f"OpenAIProvider(base_url={self.base_url!r}, model={self.model!r}, "
            f"voices={self.voices!r}, timeout_seconds={self.timeout_seconds!r})"
        )

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
        response = self.http.call("POST", self.url, json=body)
        if not response.content:
            raise RetryableProviderError("empty audio", response.status_code)
        return response.content
