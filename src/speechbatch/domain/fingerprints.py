"""What the provider would be asked, as one hash: equal fingerprints may share audio."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Protocol

Fingerprinter = Callable[[int, str, str], str]


class Speaker(Protocol):
    """What a fingerprint takes of a provider: its name and the format of its audio."""

    @property
    def name(self) -> str: ...
    @property
    def file_extension(self) -> str: ...


def audio_fingerprint(
    organization_id: int, provider: str, model: str, voice: str, audio_format: str, text: str
) -> str:
    """The fingerprint of one request: organization, provider, model, voice, format, text.

    The organization is part of the hash, so audio is never shared across organizations
    and one index on the fingerprint alone serves the per-organization lookup.
    """
    request = [organization_id, provider, model, voice, audio_format, text]
    return hashlib.sha256(json.dumps(request, ensure_ascii=False).encode()).hexdigest()


def fingerprinter(provider: Speaker) -> Fingerprinter:
    """``f(organization_id, voice, text)`` for the configured provider."""
    name, model, fmt = provider.name, str(getattr(provider, "model", "")), provider.file_extension

    def fingerprint(organization_id: int, voice: str, text: str) -> str:
        return audio_fingerprint(organization_id, name, model, voice, fmt, text)

    return fingerprint
