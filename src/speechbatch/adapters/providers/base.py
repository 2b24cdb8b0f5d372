"""What the runner needs from a text-to-speech provider, and how a call can fail."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypedDict


class Delivery(StrEnum):
    """Whether a call's request reached the provider: what the ledger bills for it."""

    # The provider answered (audio or an error status): billed.
    RECEIVED = "received"
    # It certainly never left this machine (a refused connection, a name that does not
    # resolve, a TLS handshake that failed): refunded.
    NOT_SENT = "not_sent"
    # It was written and its answer was lost (a timeout, a reset): billed, in doubt.
    IN_DOUBT = "in_doubt"


class ProviderError(Exception):
    """A provider call failed."""

    def __init__(
        self, message: str, status: int | None = None, delivery: Delivery = Delivery.RECEIVED
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.delivery = delivery


class RetryableProviderError(ProviderError):
    """A transient failure (429, 5xx, timeout, connection): the call may be tried again."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        retry_after: float | None = None,
        delivery: Delivery = Delivery.RECEIVED,
    ) -> None:
        super().__init__(message, status, delivery)
        self.retry_after = retry_after


class PermanentProviderError(ProviderError):
    """A failure that another try will not fix (a 4xx other than 429): the item fails."""


class RefusedKeyError(PermanentProviderError):
    """The provider refused the key (401/403): the item fails, and so would every other
    item of the run, which therefore ends."""


def error_for_status(status: int, message: str, retry_after: float | None = None) -> ProviderError:
    """The error of a provider's non-2xx answer, the same for every provider: 429 and 5xx
    retryable (with the provider's Retry-After), 401/403 a refused key, other 4xx
    permanent with the provider's message."""
    if status == 429 or status >= 500:
        return RetryableProviderError(message, status, retry_after)
    if status in (401, 403):
        return RefusedKeyError(message, status)
    return PermanentProviderError(message, status)


class BillingUnit(StrEnum):
    """What a provider counts for its bill and its per-call limit."""

    CHARACTERS = "characters"
    BYTES = "bytes"  # UTF-8 bytes of the text


class Span(TypedDict):
    """Where one sentence or word is spoken in a call's audio."""

    text: str
    start_seconds: float
    end_seconds: float


@dataclass(frozen=True)
class Speech:
    """What one call answered: the audio, what it billed, and timing when the provider
    gave any (``words`` and ``sentences`` in the order spoken)."""

    audio: bytes
    billed: int
    unit: BillingUnit = BillingUnit.CHARACTERS
    sentences: tuple[Span, ...] | None = None
    words: tuple[Span, ...] | None = None


class CharacterBilled:
    """For a provider whose ``synthesize`` returns bare audio and that bills the text's
    characters (OpenAI, Piper, espeak): ``speak`` and ``billed`` from it."""

    billing_unit = BillingUnit.CHARACTERS

    def billed(self, text: str) -> int:
        """What a call with ``text`` bills: its characters."""
        return len(text)

    def synthesize(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> bytes:
        raise NotImplementedError

    def speak(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> Speech:
        """One call (see ``TTSProvider.speak``), with the sentences a ``TimedAudio``
        answer carries (Piper's)."""
        audio = self.synthesize(text, voice, options)
        spans = timing_of(audio)
        sentences = tuple(Span(**span) for span in spans) if spans else None  # type: ignore[typeddict-item]
        return Speech(bytes(audio), self.billed(text), sentences=sentences)


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


class TimedAudio(bytes):
    """Audio as a provider answered it, with its timing of what it says when it gives
    some: spans ``{"text", "start_seconds", "end_seconds"}``, words or sentences."""

    timing: tuple[dict[str, Any], ...] | None

    def __new__(cls, audio: bytes, timing: tuple[dict[str, Any], ...] | None) -> TimedAudio:
        made = super().__new__(cls, audio)
        made.timing = timing
        return made


def timing_of(audio: bytes) -> tuple[dict[str, Any], ...] | None:
    """The provider's timing of a call's audio, if it gave any."""
    return audio.timing if isinstance(audio, TimedAudio) else None


class TTSProvider(Protocol):
    """One provider: a set of voices and one billed call per item.

    ``max_chars`` is the per-call limit of a spoken text in characters (a provider whose
    limit is in bytes, Google, also checks its request's bytes before sending);
    ``billing_unit`` and ``billed`` say what a call costs before it is made, so that the
    ledger reserves exactly what the provider will count.
    """

    @property
    def name(self) -> str:
        """The provider's name (``openai``, ``elevenlabs``…)."""
        ...

    @property
    def max_chars(self) -> int:
        """The per-call limit of a spoken text, in characters."""
        ...

    @property
    def content_type(self) -> str:
        """The audio's media type."""
        ...

    @property
    def file_extension(self) -> str:
        """The audio's file extension."""
        ...

    @property
    def billing_unit(self) -> BillingUnit:
        """What a call bills: characters, or bytes."""
        ...

    @property
    def voices(self) -> tuple[str, ...]:
        """The voices a call may name (a paid provider's from its voices call, cached)."""
        ...

    def billed(self, text: str) -> int:
        """What one call with ``text`` bills, in ``billing_unit``s (every request of it)."""
        ...

    def speak(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> Speech:
        """Make one provider call (no retries) and return its audio, bill and timing;
        ``options`` are the job's (``speed``, ``instructions``), which a provider honours
        as it can. Failures raise ``ProviderError`` (``error_for_status`` for an answer)."""
        ...
