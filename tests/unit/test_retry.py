"""after_failure: what follows a failed provider call (backoff, Retry-After, the cap, giving
up), and the metrics label of a call."""

from __future__ import annotations

import pytest
import requests

from speechbatch.adapters.providers import (
    PermanentProviderError,
    ProviderError,
    RetryableProviderError,
)
from speechbatch.adapters.providers.base import Delivery
from speechbatch.adapters.providers.retry import after_failure, call_label


def unavailable(retry_after: float | None = None) -> RetryableProviderError:
    return RetryableProviderError("provider answered 503: busy", 503, retry_after)


def waits(
    *errors: ProviderError, max_attempts: int = 10, timeout: float = 60.0, rand: float = 1.0
) -> list[float | PermanentProviderError]:
    """What follows each of ``errors``, failing attempts 1, 2, ... in turn."""
    return [
        after_failure(
            error, n, max_attempts=max_attempts, timeout_seconds=timeout, rand=lambda: rand
        )
        for n, error in enumerate(errors, start=1)
    ]


def test_retryable_failures_back_off_exponentially() -> None:
    assert waits(unavailable(), unavailable(), unavailable()) == [0.5, 1.0, 2.0]


def test_full_jitter_scales_the_backoff() -> None:
    assert waits(unavailable(), unavailable(), rand=0.5) == [0.25, 0.5]


def test_waits_are_capped_at_the_timeout() -> None:
    assert waits(*[unavailable()] * 5, timeout=3.0) == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_retry_after_is_honoured() -> None:
    limited = RetryableProviderError("provider answered 429: slow down", 429, 7.0)
    assert waits(limited) == [7.0]


def test_retry_after_shorter_than_backoff_keeps_backoff() -> None:
    assert waits(unavailable(), unavailable(), unavailable(0.1)) == [0.5, 1.0, 2.0]


def test_retry_after_above_the_cap_fails_at_once_as_rate_limited() -> None:
    limited = RetryableProviderError("provider answered 429: slow down", 429, 120.0)
    (step,) = waits(limited, timeout=60.0)
    assert isinstance(step, PermanentProviderError)
    assert "rate limited" in step.message and "120 s" in step.message
    assert step.status == 429


def test_a_permanent_error_ends_the_item_as_it_is() -> None:
    error = PermanentProviderError("provider answered 400: bad voice", 400)
    assert waits(error) == [error]


def test_another_provider_error_ends_the_item_with_its_message() -> None:
    (step,) = waits(ProviderError("something odd"))
    assert isinstance(step, PermanentProviderError) and step.message == "something odd"


def test_the_last_allowed_attempt_gives_up_with_its_message() -> None:
    errors = [unavailable(), unavailable(), RetryableProviderError("provider answered 502: x", 502)]
    *retries, last = waits(*errors, max_attempts=3)
    assert all(isinstance(wait, float) for wait in retries)
    assert isinstance(last, PermanentProviderError)
    assert "gave up after 3 attempts" in last.message
    assert "provider answered 502: x" in last.message
    assert last.status == 502


def test_a_single_attempt_does_not_retry() -> None:
    (step,) = waits(unavailable(), max_attempts=1)
    assert isinstance(step, PermanentProviderError)
    assert "gave up after 1 attempt:" in step.message


def _caused(error: ProviderError, cause: BaseException) -> ProviderError:
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("error", "label"),
    [
        (None, "200"),
        (RetryableProviderError("slow down", 429, 1.0), "429"),
        (unavailable(), "503"),
        (_caused(RetryableProviderError("timed out"), requests.ReadTimeout()), "timeout"),
        (_caused(RetryableProviderError("reset"), requests.ConnectionError()), "connection_error"),
        (RetryableProviderError("refused", delivery=Delivery.NOT_SENT), "not_sent"),
        (ProviderError("odd"), "error"),
    ],
)
def test_every_call_has_a_label(error: ProviderError | None, label: str) -> None:
    assert call_label(error) == label
