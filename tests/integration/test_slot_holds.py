"""Slots that hold: at most PROVIDER_CONCURRENCY calls in flight at the provider, whatever
holds a slot's holder up between taking its slot and sending (a pace or Retry-After wait,
a database away), and under a storm of 429s.

Each "process" is an app built on the test's database (``make_svc``); all of them call one
counting fake provider, whose ``max_in_flight`` is the peak at the provider.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import RunUnit
from speechbatch.app import Services
from speechbatch.errors import DatabaseUnavailable
from speechbatch.services import create_job, start_generation
from tests.fakes import FakeProvider, rate_limited
from tests.helpers import LIMITS, new_job, view, wait_for

# A slot counts as free once held longer than timeout + WORKER_DEAD_SECONDS + 5 s: 6 s here.
SHORT = {"tts_timeout_seconds": 0.5, "worker_dead_seconds": 0.5, "provider_concurrency": 1}


class _HeldUp:
    """Process A's runner: once its first slot is taken, every transaction of the
    runner fails as an unreachable database for ``seconds`` (its heartbeat goes on)."""

    def __init__(self, svc: Services, seconds: float) -> None:
        self.seconds = seconds
        self.until = 0.0
        self.took = threading.Event()
        factory, take = svc.runner.tx.uow_factory, svc.runner.gate.take

        def unit() -> RunUnit:
            if self.took.is_set() and not self.until:
                self.until = time.monotonic() + seconds
            if time.monotonic() < self.until:
                raise DatabaseUnavailable()
            return factory()

        def taking(*args: Any, **kwargs: Any) -> Any:
            grant = take(*args, **kwargs)
            if grant is not None:
                self.took.set()
            return grant

        svc.runner.tx.uow_factory = unit
        svc.runner.gate.take = taking  # type: ignore[method-assign]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_holder_held_up_past_its_slots_longest_hold_never_sends_on_it_once_given_away(
    make_svc: Callable[..., Services], admin: UserRecord, provider: FakeProvider
) -> None:
    """A takes the one slot, then its database is away (6.5 s) before it sends: past the
    slot's longest hold, so B takes the slot over and sends (a 2 s call). When A's
    database is back it must not send on the slot B holds: at most one call in flight.
    (Before, A sent as soon as its database was back: two calls in flight.)"""
    provider.latency = 2.0
    a, b = make_svc(**SHORT), make_svc(**SHORT)
    held_up = _HeldUp(a, seconds=6.5)
    first = new_job(a, admin, 1, title="a")
    start_generation(a.uow_factory, a.settings, a.runner, admin, first)
    assert held_up.took.wait(10)
    second = new_job(b, admin, 1, title="b")
    start_generation(b.uow_factory, b.settings, b.runner, admin, second)
    for svc, job_id in ((a, first), (b, second)):
        _wait_completed(svc, admin, job_id, 30)
    assert provider.total_calls() == 2
    assert provider.max_in_flight == 1


def _wait_completed(svc: Services, admin: UserRecord, job_id: int, timeout: float) -> None:
    wait_for(lambda: view(svc, admin, job_id)["status"] == "COMPLETED", timeout=timeout)


class _Storm(FakeProvider):
    """Answers 429 with Retry-After ``retry_after`` (after ``latency``) for ``seconds``
    from its first call."""

    def __init__(self, seconds: float, latency: float, retry_after: float) -> None:
        super().__init__(latency=latency)
        self.seconds = seconds
        self.until = float("inf")
        self.retry_after = retry_after

    def synthesize(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> bytes:
        self.until = min(self.until, time.monotonic() + self.seconds)
        if time.monotonic() < self.until:
            self.fail_texts[text] = rate_limited(self.retry_after)
        else:
            self.fail_texts.pop(text, None)
        return super().synthesize(text, voice, options)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_429_storm_never_puts_more_calls_in_flight_than_the_slots(
    make_svc: Callable[..., Services], admin: UserRecord
) -> None:
    """Two processes, two jobs each, two slots; every call for 3 s answers 429 with a
    Retry-After of the whole call timeout, slowly: never more than two calls in flight."""
    storm = _Storm(seconds=3.0, latency=0.8, retry_after=1.0)
    settings: dict[str, Any] = {
        "provider_concurrency": 2, "tts_timeout_seconds": 1.0, "worker_dead_seconds": 1.0,
        "tts_max_attempts": 12, "lease_seconds": 60.0,
    }  # fmt: skip
    processes = [make_svc(**settings), make_svc(**settings)]
    jobs = []
    for n, svc in enumerate(processes):
        svc.runner.provider = storm
        for k in range(2):
            texts = [f"job {n}{k} line {i}" for i in range(2)]
            job_id = create_job(svc.uow_factory, admin, f"job {n}{k}", "alloy", texts, LIMITS)
            jobs.append((svc, job_id))
    for svc, job_id in jobs:
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    for svc, job_id in jobs:
        _wait_completed(svc, admin, job_id, 60)
    assert storm.max_in_flight <= 2
    assert storm.total_calls() > len(jobs) * 2  # the storm was met: calls answered 429
