"""What the provider would be asked, as one hash: equal fingerprints may share audio."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Protocol


class Speaker(Protocol):
    """What a fingerprint takes of a provider: its name and the format of its audio."""

    @property
    def name(self) -> str: ...
    @property
    def file_extension(self) -> str: ...


class Fingerprinter(Protocol):
    """``f(organization_id, voice, spoken_text, options)`` for one provider."""

    def __call__(
        self,
        organization_id: int,
        voice: str,
        text: str,
        options: Mapping[str, Any] | None = None,
    ) -> str: ...


def audio_fingerprint(
    organization_id: int,
    provider: str,
    model: str,
    voice: str,
    audio_format: str,
    text: str,
    options: Mapping[str, Any] | None = None,
) -> str:
    """The fingerprint of one request: organization, provider, model, voice, format, the
    spoken text and the job's options (speed, instructions).

    The organization is part of the hash, so audio is never shared across organizations
    and one index on the fingerprint alone serves the per-organization lookup. Without
    options the hash is what it was before options existed, so that audio stays reusable.
    """
    request: list[Any] = [organization_id, provider, model, voice, audio_format, text]
    if options:
        request.append(dict(sorted(options.items())))
    return hashlib.sha256(json.dumps(request, ensure_ascii=False).encode()).hexdigest()


def fingerprinter(provider: Speaker) -> Fingerprinter:
    """``f(organization_id, voice, spoken_text, options)`` for the configured provider."""
    name, model, fmt = provider.name, str(getattr(provider, "model", "")), provider.file_extension

    def fingerprint(
        organization_id: int,
        voice: str,
        text: str,
        options: Mapping[str, Any] | None = None,
    ) -> str:
        return audio_fingerprint(organization_id, name, model, voice, fmt, text, options)

    return fingerprint
