"""A paid provider's voices, listed by its own voices call and cached.

The list is fetched at first use and again after ``ttl_seconds``. A fetch that fails
keeps the last list (or none at first) and is tried again after ``retry_seconds``, so an
unreachable provider costs one timeout per minute, not one per request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from speechbatch.adapters.providers.base import ProviderError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Voice:
    """One voice as the provider lists it: its name in calls, a label, a language."""

    name: str
    label: str
    language: str


class VoiceCache:
    """The voices of one provider (see the module)."""

    def __init__(
        self,
        provider: str,
        fetch: Callable[[], list[Voice]],
        *,
        ttl_seconds: float = 3600.0,
        retry_seconds: float = 60.0,
    ) -> None:
        self.provider = provider
        self._fetch = fetch
        self._ttl = ttl_seconds
        self._retry = retry_seconds
        self._voices: tuple[Voice, ...] = ()
        self._due = 0.0
        self._lock = threading.Lock()

    def voices(self) -> tuple[Voice, ...]:
        """The cached voices, fetched again when due."""
        with self._lock:
            if time.monotonic() >= self._due:
                try:
                    self._voices = tuple(self._fetch())
                    self._due = time.monotonic() + self._ttl
                except ProviderError as exc:
                    log.warning("could not list %s voices: %s", self.provider, exc.message)
                    self._due = time.monotonic() + self._retry
            return self._voices

    def names(self) -> tuple[str, ...]:
        """The names of the cached voices."""
        return tuple(v.name for v in self.voices())

    def language_of(self, name: str) -> str | None:
        """The language of voice ``name``, if listed."""
        return next((v.language for v in self.voices() if v.name == name), None)
