"""Retrying one item's provider call: backoff with full jitter, Retry-After, a hard cap.

After a failed attempt ``after_failure`` says what comes next: another attempt after a
wait, or the item's end with an error. Retryable errors wait ``rand() * 0.5 * 2**(n-1)``
seconds after attempt n, at least the provider's Retry-After, never more than the call's
timeout (which bounds an item's worst case); a Retry-After above that cap fails the item
at once as rate-limited. Permanent errors end it at once; the last allowed attempt's
failure ends it with "gave up after N attempts" and that failure's message.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import requests

from speechbatch.adapters.providers.base import (
    Delivery,
    PermanentProviderError,
    ProviderError,
    RetryableProviderError,
)

BASE_DELAY_SECONDS = 0.5


def call_label(error: BaseException | None) -> str:
    """Metrics label of a call: "200", its HTTP status, or what kind of failure it was
    ("not_sent" when it never left this machine)."""
    if error is None:
        return "200"
    if isinstance(error, ProviderError):
        if error.delivery is Delivery.NOT_SENT:
            return "not_sent"
        if error.status is not None:
            return str(error.status)
    # Check timeouts first: requests.ConnectTimeout is both a Timeout and a ConnectionError.
    cause = error.__cause__
    if isinstance(cause, requests.Timeout | TimeoutError):
        return "timeout"
    if isinstance(cause, requests.ConnectionError | ConnectionError):
        return "connection_error"
    return "error"


def after_failure(
    error: ProviderError,
    attempt: int,
    *,
    max_attempts: int,
    timeout_seconds: float,
    rand: Callable[[], float] = random.random,
) -> float | PermanentProviderError:
    """What follows the failed attempt number ``attempt`` (1-based): the seconds to wait
    before the next one, or the error the item ends with."""
    if not isinstance(error, RetryableProviderError):
        return error if isinstance(error, PermanentProviderError) else _permanent(error)
    if error.retry_after is not None and error.retry_after > timeout_seconds:
        return PermanentProviderError(
            f"rate limited: provider asked to wait {error.retry_after:g} s, more than the "
            f"{timeout_seconds:g} s cap ({error.message})",
            error.status,
        )
    if attempt >= max_attempts:
        return PermanentProviderError(
            f"gave up after {attempt} attempt{'s' if attempt != 1 else ''}: {error.message}",
            error.status,
        )
    wait = rand() * BASE_DELAY_SECONDS * 2 ** (attempt - 1)
    if error.retry_after is not None:
        wait = max(wait, error.retry_after)
    return min(wait, timeout_seconds)


def _permanent(error: ProviderError) -> PermanentProviderError:
    return PermanentProviderError(error.message, error.status, error.delivery)
