"""Several providers in one deployment (``SPEECHBATCH_TTS_PROVIDERS``).

A voice is written ``PROVIDER:VOICE``; a bare name is the default provider's voice. The
set answers as its default provider does (name, format, bill), so code that knows one
provider keeps working; the runner resolves each run's voice to its provider
(``resolve``) and calls, bills and fingerprints with that one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from speechbatch.adapters.providers.base import BillingUnit, Speech, TTSProvider
from speechbatch.adapters.providers.voices import VoiceCache
from speechbatch.shapes.accounts import VoiceDetail


class ProviderSet:
    """The enabled providers, the default first (see the module)."""

    def __init__(self, providers: Mapping[str, TTSProvider]) -> None:
        if not providers:
            raise ValueError("a provider set needs a provider")
        self.providers = dict(providers)
        self.default = next(iter(self.providers.values()))

    def __repr__(self) -> str:
        return f"ProviderSet({list(self.providers)!r})"

    @property
    def name(self) -> str:
        """The default provider's name."""
        return self.default.name

    @property
    def max_chars(self) -> int:
        """The smallest per-call limit: an item fits every provider's voices."""
        return min(p.max_chars for p in self.providers.values())

    @property
    def content_type(self) -> str:
        """The default provider's audio type."""
        return self.default.content_type

    @property
    def file_extension(self) -> str:
        """The default provider's file extension."""
        return self.default.file_extension

    @property
    def billing_unit(self) -> BillingUnit:
        """The default provider's billing unit."""
        return self.default.billing_unit

    @property
    def model(self) -> str:
        """The default provider's model (part of the fingerprint)."""
        return str(getattr(self.default, "model", ""))

    @property
    def voices(self) -> tuple[str, ...]:
        """The default provider's bare names, and with several providers every
        ``PROVIDER:VOICE``."""
        bare = tuple(self.default.voices)
        if len(self.providers) == 1:
            return bare
        return bare + tuple(f"{n}:{v}" for n, p in self.providers.items() for v in p.voices)

    def billed(self, text: str) -> int:
        """What the default provider bills for ``text``."""
        return self.default.billed(text)

    def speak(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> Speech:
        """One call by the voice's provider."""
        provider, bare = self.resolve(voice)
        return provider.speak(text, bare, options)

    def resolve(self, voice: str) -> tuple[TTSProvider, str]:
        """The provider of ``voice`` and its name there."""
        name, sep, bare = voice.partition(":")
        if sep and name in self.providers:
            return self.providers[name], bare
        return self.default, voice

    def details(self) -> list[VoiceDetail]:
        """Every voice with its provider, label and language (as listed)."""
        found: list[VoiceDetail] = []
        several = len(self.providers) > 1
        for n, provider in self.providers.items():
            cache = getattr(provider, "voice_cache", None)
            listed = {v.name: v for v in cache.voices()} if isinstance(cache, VoiceCache) else {}
            for v in provider.voices:
                known = listed.get(v)
                name = f"{n}:{v}" if several or provider is not self.default else v
                found.append({
                    "name": name, "provider": n,
                    "label": known.label if known else v,
                    "language": known.language if known else "",
                })  # fmt: skip
        return found


def resolve(provider: TTSProvider, voice: str) -> tuple[TTSProvider, str]:
    """The provider that speaks ``voice`` and the voice's name there: a set's member,
    or ``provider`` itself (a ``PROVIDER:`` prefix of its own name dropped)."""
    if isinstance(provider, ProviderSet):
        return provider.resolve(voice)
    prefix = provider.name + ":"
    return provider, voice.removeprefix(prefix)


def voice_details(provider: TTSProvider) -> list[VoiceDetail]:
    """``GET /api/voices``' details of ``provider`` (a set, or one provider)."""
    if isinstance(provider, ProviderSet):
        return provider.details()
    return ProviderSet({provider.name: provider}).details()
