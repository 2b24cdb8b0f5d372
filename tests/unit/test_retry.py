"""synthesize_with_retries: backoff, Retry-After, the cap, fencing and metrics."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
import requests

from speechbatch.adapters.providers import (
    PermanentProviderError,
    ProviderError,
    RetryableProviderError,
    synthesize_with_retries,
)

Outcome = bytes | BaseException


class FakeProvider:
    """Plays back a script of outcomes, one per call, and records the calls."""

    name = "fake"
    voices: tuple[str, ...] = ("v",)
    max_chars = 4096
    content_type = "audio/mpeg"
    file_extension = "mp3"

    def __init__(self, *outcomes: Outcome) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, str]] = []

    def synthesize(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> bytes:
        self.calls.append((text, voice))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


class Sleeps:
    """A fake sleep that records how long it was asked to wait."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def run(
    provider: FakeProvider,
    sleeps: Sleeps,
    *,
    max_attempts: int = 4,
    timeout_seconds: float = 60.0,
    rand: Callable[[], float] = lambda: 1.0,
    **kwargs: object,
) -> bytes:
    return synthesize_with_retries(
        provider,
        "hello",
        "v",
        max_attempts=max_attempts,
        timeout_seconds=timeout_seconds,
        sleep=sleeps,
        rand=rand,
        **kwargs,  # type: ignore[arg-type]
    )


def unavailable(retry_after: float | None = None) -> RetryableProviderError:
    return RetryableProviderError("provider answered 503: busy", 503, retry_after)


def test_success_first_time_does_not_sleep() -> None:
    provider, sleeps = FakeProvider(b"mp3"), Sleeps()
    assert run(provider, sleeps) == b"mp3"
    assert provider.calls == [("hello", "v")]
    assert sleeps.waits == []


def test_two_503_then_success_backs_off_exponentially() -> None:
    provider, sleeps = FakeProvider(unavailable(), unavailable(), b"mp3"), Sleeps()
    assert run(provider, sleeps) == b"mp3"
    assert len(provider.calls) == 3
    # rand() == 1.0 gives the full backoff: 0.5 s, then 1 s.
    assert sleeps.waits == [0.5, 1.0]


def test_full_jitter_scales_the_backoff() -> None:
    provider, sleeps = FakeProvider(unavailable(), unavailable(), b"mp3"), Sleeps()
    run(provider, sleeps, rand=lambda: 0.25)
    assert sleeps.waits == [0.125, 0.25]


def test_waits_are_capped_at_the_timeout() -> None:
    provider = FakeProvider(*(unavailable() for _ in range(5)), b"mp3")
    sleeps = Sleeps()
    run(provider, sleeps, max_attempts=6, timeout_seconds=3.0)
    assert sleeps.waits == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_retry_after_is_honoured() -> None:
    limited = RetryableProviderError("provider answered 429: slow down", 429, 7.0)
    provider, sleeps = FakeProvider(limited, b"mp3"), Sleeps()
    assert run(provider, sleeps) == b"mp3"
    assert sleeps.waits == [7.0]


def test_retry_after_shorter_than_backoff_keeps_backoff() -> None:
    provider = FakeProvider(unavailable(), unavailable(), unavailable(0.1), b"mp3")
    sleeps = Sleeps()
    run(provider, sleeps)
    assert sleeps.waits == [0.5, 1.0, 2.0]


def test_retry_after_above_the_cap_fails_at_once_as_rate_limited() -> None:
    limited = RetryableProviderError("provider answered 429: slow down", 429, 120.0)
    provider, sleeps = FakeProvider(limited, b"never"), Sleeps()
    with pytest.raises(PermanentProviderError, match=r"rate limited.*120 s") as info:
        run(provider, sleeps, timeout_seconds=60.0)
    assert info.value.status == 429
    assert len(provider.calls) == 1
    assert sleeps.waits == []


@pytest.mark.parametrize(
    "error",
    [
        PermanentProviderError("provider answered 400: bad voice", 400),
        ProviderError("something odd"),
        RuntimeError("bug"),
    ],
)
def test_non_retryable_errors_propagate_at_once(error: BaseException) -> None:
    provider, sleeps = FakeProvider(error, b"never"), Sleeps()
    with pytest.raises(type(error)) as info:
        run(provider, sleeps)
    assert info.value is error
    assert len(provider.calls) == 1
    assert sleeps.waits == []


def test_exhausting_attempts_gives_up_with_the_last_message() -> None:
    errors = [unavailable(), unavailable(), RetryableProviderError("provider answered 502: x", 502)]
    provider, sleeps = FakeProvider(*errors, b"never"), Sleeps()
    with pytest.raises(PermanentProviderError) as info:
        run(provider, sleeps, max_attempts=3)
    message = str(info.value)
    assert "gave up after 3 attempts" in message
    assert "provider answered 502: x" in message
    assert info.value.status == 502
    assert len(provider.calls) == 3
    assert len(sleeps.waits) == 2  # no wait after the last attempt


def test_single_attempt_does_not_retry() -> None:
    provider, sleeps = FakeProvider(unavailable(), b"never"), Sleeps()
    with pytest.raises(PermanentProviderError, match="gave up after 1 attempt:"):
        run(provider, sleeps, max_attempts=1)
    assert len(provider.calls) == 1


def test_before_attempt_runs_before_every_call() -> None:
    events: list[str] = []

    class Recording(FakeProvider):
        def synthesize(
            self, text: str, voice: str, options: Mapping[str, Any] | None = None
        ) -> bytes:
            events.append("call")
            return super().synthesize(text, voice, options)

    provider = Recording(unavailable(), unavailable(), b"mp3")
    run(provider, Sleeps(), before_attempt=lambda n: events.append(f"fence {n}"))
    assert events == ["fence 1", "call", "fence 2", "call", "fence 3", "call"]


def test_before_attempt_exception_propagates_without_another_call() -> None:
    class LostLease(Exception):
        pass

    def fence(attempt: int) -> None:
        if attempt == 2:
            raise LostLease("another run owns the job")

    provider, sleeps = FakeProvider(unavailable(), b"never"), Sleeps()
    with pytest.raises(LostLease, match="another run owns the job"):
        run(provider, sleeps, before_attempt=fence)
    assert len(provider.calls) == 1


def test_on_result_labels_every_call() -> None:
    def timeout() -> RetryableProviderError:
        error = RetryableProviderError("timed out")
        error.__cause__ = requests.ReadTimeout()
        return error

    def refused() -> RetryableProviderError:
        error = RetryableProviderError("cannot reach provider")
        error.__cause__ = requests.ConnectionError()
        return error

    results: list[tuple[str, float]] = []
    provider = FakeProvider(
        RetryableProviderError("429", 429, 0.0),
        unavailable(),
        timeout(),
        refused(),
        RetryableProviderError("mystery"),
        b"mp3",
    )
    run(provider, Sleeps(), max_attempts=6, on_result=lambda label, s: results.append((label, s)))
    assert [label for label, _ in results] == [
        "429",
        "503",
        "timeout",
        "connection_error",
        "error",
        "200",
    ]
    assert all(seconds >= 0 for _, seconds in results)


def test_on_result_sees_permanent_failures() -> None:
    results: list[str] = []
    provider = FakeProvider(PermanentProviderError("bad", 400))
    with pytest.raises(PermanentProviderError):
        run(provider, Sleeps(), on_result=lambda label, s: results.append(label))
    assert results == ["400"]


def test_max_attempts_must_be_positive() -> None:
    with pytest.raises(ValueError):
        run(FakeProvider(b"mp3"), Sleeps(), max_attempts=0)
