"""Fixtures shared by the webhook tests: a scripted receiver, and apps that send."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from speechbatch.app import Services
from tests.support.webhook_receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A receiver answering 200 unless a test scripts it."""
    r = Receiver(hang_seconds=1.5, refuse_seconds=1.0)
    yield r
    r.stop()


@pytest.fixture
def sending(make_svc: Callable[..., Services]) -> Callable[..., Services]:
    """An app whose webhook senders run (short timeout, quick polls), for a schedule."""

    def start(schedule: tuple[float, ...] = (0.1,), allow_private: bool = True) -> Services:
        svc = make_svc(
            webhook_retry_schedule=schedule,
            webhook_allow_private=allow_private,
            webhook_timeout_seconds=0.5,
            webhook_idle_seconds=0.05,
        )
        svc.runner.start_background()
        return svc

    return start
