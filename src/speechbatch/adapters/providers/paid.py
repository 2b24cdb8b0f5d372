"""What the paid HTTP providers (ElevenLabs, Azure, Google) share: their client, their
cached voices, a bill of the text's characters unless they say otherwise, and audio
answered in base64."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from speechbatch.adapters.providers.base import (
    BillingUnit,
    PermanentProviderError,
    RetryableProviderError,
)
from speechbatch.adapters.providers.http import HttpClient
from speechbatch.adapters.providers.voices import Voice, VoiceCache


class PaidHttpProvider:
    """A provider over HTTP whose voices come from its own voices call."""

    name = "paid"
    content_type = "audio/mpeg"
    file_extension = "mp3"
    billing_unit = BillingUnit.CHARACTERS

    def __init__(self, base_url: str, secret: str | None, timeout_seconds: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.http = HttpClient(timeout_seconds, secrets=(secret,))
        self.voice_cache = VoiceCache(self.name, self._list_voices)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    @property
    def voices(self) -> tuple[str, ...]:
        """The voices the provider lists (cached)."""
        return self.voice_cache.names()

    def billed(self, text: str) -> int:
        """Characters of the text."""
        return len(text)

    def check_voice(self, voice: str) -> None:
        """Refuse a voice the provider's list lacks (when the list could be read: job
        creation has checked it already)."""
        known = self.voices
        if known and voice not in known:
            raise PermanentProviderError(f"unknown voice {voice!r} for provider {self.name}")

    def _list_voices(self) -> list[Voice]:
        raise NotImplementedError


def base64_audio(payload: Mapping[str, Any], field: str) -> bytes:
    """The audio of a JSON answer's base64 ``field``; broken or empty audio is retryable."""
    try:
        audio = base64.b64decode(payload[field], validate=True)
    except (binascii.Error, TypeError, ValueError) as exc:
        raise RetryableProviderError("provider answered invalid base64 audio", 200) from exc
    if not audio:
        raise RetryableProviderError("empty audio", 200)
    return audio
