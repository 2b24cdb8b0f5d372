"""Retrying one item's provider call: backoff with full jitter, Retry-After, a hard cap."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import requests

from speechbatch.adapters.providers.base import (
    CallNotSent,
    PermanentProviderError,
    ProviderError,
    RetryableProviderError,
    TTSProvider,
)

BASE_DELAY_SECONDS = 0.5


def _label(exc: BaseException) -> str:
    """Metrics label of a failed call: its HTTP status, or what kind of failure it was."""
    if isinstance(exc, ProviderError) and exc.status is not None:
        return str(exc.status)
    # Check timeouts first: requests.ConnectTimeout is both a Timeout and a ConnectionError.
    cause = exc.__cause__
    if isinstance(cause, requests.Timeout | TimeoutError):
        return "timeout"
    if isinstance(cause, requests.ConnectionError | ConnectionError):
        return "connection_error"
    return "error"


def synthesize_with_retries(
    provider: TTSProvider,
    text: str,
    voice: str,
    *,
    max_attempts: int,
    timeout_seconds: float,
    before_attempt: Callable[[int], None] = lambda n: None,
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] = random.random,
    on_result: Callable[[str, float], None] | None = None,
    options: Mapping[str, Any] | None = None,
) -> bytes:
    """Call ``provider.synthesize`` up to ``max_attempts`` times and return the audio.

    ``before_attempt(n)`` (n is 1-based) runs before every call; whatever it raises
    propagates untouched, so a caller that lost its lease stops before a billed call.
    Retryable errors wait ``rand() * 0.5 * 2**(n-1)`` seconds, at least the provider's
    Retry-After, never more than ``timeout_seconds`` (which bounds an item's worst case);
    a Retry-After above that cap fails at once. Permanent errors propagate at once;
    exhausting the attempts raises PermanentProviderError with the last error's message.
    ``on_result(label, seconds)`` is told of every call (label "200", "429", "timeout", ...).
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    last: RetryableProviderError | None = None
    for attempt in range(1, max_attempts + 1):
        before_attempt(attempt)
        started = time.monotonic()
        try:
            audio = provider.synthesize(text, voice, options)
        except RetryableProviderError as exc:
            if on_result is not None:
                on_result(_label(exc), time.monotonic() - started)
            last = exc
        except CallNotSent:
            raise  # not a call: nothing to tell on_result
        except BaseException as exc:
            if on_result is not None:
                on_result(_label(exc), time.monotonic() - started)
            raise
        else:
            if on_result is not None:
                on_result("200", time.monotonic() - started)
            return audio

        if last.retry_after is not None and last.retry_after > timeout_seconds:
            raise _rate_limited(last, timeout_seconds) from last
        if attempt < max_attempts:
            sleep(_wait_before_retry(last, attempt, timeout_seconds, rand))

    assert last is not None  # the loop ran at least once and only falls out after a failure
    raise PermanentProviderError(
        f"gave up after {max_attempts} attempt{'s' if max_attempts != 1 else ''}: {last.message}",
        last.status,
    ) from last


def _rate_limited(last: RetryableProviderError, timeout_seconds: float) -> PermanentProviderError:
    """A provider that asks for a longer wait than the cap fails the item at once."""
    return PermanentProviderError(
        f"rate limited: provider asked to wait {last.retry_after:g} s, more than the "
        f"{timeout_seconds:g} s cap ({last.message})",
        last.status,
    )


def _wait_before_retry(
    last: RetryableProviderError, attempt: int, timeout_seconds: float, rand: Callable[[], float]
) -> float:
    """Full jitter, at least the provider's Retry-After, at most the call's timeout."""
    wait = rand() * BASE_DELAY_SECONDS * 2 ** (attempt - 1)
    if last.retry_after is not None:
        wait = max(wait, last.retry_after)
    return min(wait, timeout_seconds)
