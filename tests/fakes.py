"""In-process fakes shared by the tests."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter

from speechbatch.providers.base import PermanentProviderError, RetryableProviderError


def fake_audio(text: str) -> bytes:
    """Deterministic bytes standing for the audio of ``text``."""
    return b"ID3FAKE" + hashlib.sha256(text.encode()).digest()


class FakeProvider:
    """A provider that counts every (billed) call per text, with latency and faults."""

    name = "fake"
    max_chars = 4096
    content_type = "audio/mpeg"
    file_extension = "mp3"

    def __init__(self, voices: tuple[str, ...] = ("alloy", "echo"), latency: float = 0.0) -> None:
        self.voices = voices
        self.latency = latency
        self.calls: Counter[str] = Counter()
        self.fail_texts: dict[str, Exception] = {}
        self.gate: threading.Event | None = None  # when set, calls wait for it
        self.in_flight = 0
        self.max_in_flight = 0
        self.started: list[tuple[str, float]] = []  # (text, time.monotonic()) per call
        self._lock = threading.Lock()

    def synthesize(self, text: str, voice: str) -> bytes:
        with self._lock:
            self.calls[text] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.started.append((text, time.monotonic()))
        try:
            if self.gate is not None:
                self.gate.wait(30)
            if self.latency:
                time.sleep(self.latency)
            error = self.fail_texts.get(text)
            if error is not None:
                raise error
            return fake_audio(text)
        finally:
            with self._lock:
                self.in_flight -= 1

    def total_calls(self) -> int:
        """How many calls were made in all."""
        with self._lock:
            return sum(self.calls.values())


def permanent(message: str = "bad input") -> PermanentProviderError:
    """A permanent provider failure."""
    return PermanentProviderError(message, status=400)


def retryable(message: str = "overloaded") -> RetryableProviderError:
    """A transient provider failure."""
    return RetryableProviderError(message, status=503)


def rate_limited(retry_after: float) -> RetryableProviderError:
    """A 429 with Retry-After."""
    return RetryableProviderError("rate limited", status=429, retry_after=retry_after)
