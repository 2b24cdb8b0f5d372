"""What the runner needs from a text-to-speech provider, and how a call can fail."""

from __future__ import annotations

from typing import Protocol


class ProviderError(Exception):
    """A provider call failed."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class RetryableProviderError(ProviderError):
    """A transient failure (429, 5xx, timeout, connection): the call may be tried again."""

    def __init__(
        self, message: str, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status)
        self.retry_after = retry_after


class PermanentProviderError(ProviderError):
    """A failure that another try will not fix (a 4xx other than 429): the item fails."""


class TTSProvider(Protocol):
    """One provider: a set of voices and one billed call per item."""

    name: str
    voices: tuple[str, ...]
    max_chars: int
    content_type: str
    file_extension: str

    def synthesize(self, text: str, voice: str) -> bytes:
        """Make one provider call (no retries) and return the audio bytes."""
        ...
