"""What the runner needs from a text-to-speech provider, and how a call can fail."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol


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


class CallNotSent(Exception):
    """A send guard refused the request before it left: nothing was sent or billed."""


# Runs in the calling thread right before a provider's request leaves (see ``guarded``).
_send_guard: ContextVar[Callable[[], None] | None] = ContextVar("send_guard", default=None)


@contextmanager
def guarded(guard: Callable[[], None]) -> Iterator[None]:
    """Within the block, providers that send requests run ``guard`` as the last step
    before a request leaves (HTTP: in the transport, see ``openai``); it raises CallNotSent to
    keep the request from being sent."""
    token = _send_guard.set(guard)
    try:
        yield
    finally:
        _send_guard.reset(token)


def check_send_guard() -> None:
    """Run the current send guard, if any (a provider calls this right before sending)."""
    guard = _send_guard.get()
    if guard is not None:
        guard()


class TTSProvider(Protocol):
    """One provider: a set of voices and one billed call per item."""

    name: str
    voices: tuple[str, ...]
    max_chars: int
    content_type: str
    file_extension: str

    def synthesize(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> bytes:
        """Make one provider call (no retries) and return the audio bytes; ``options``
        are the job's (``speed``, ``instructions``), which a provider honours as it can."""
        ...
