"""The lock that keeps a PostgreSQL restart of the chaos suite away from the tests that run
meanwhile on the other pytest-xdist worker (tests/support/workers.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.support import workers


@pytest.fixture(autouse=True)
def own_lock_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "LOCK_FILE", tmp_path / "postgresql.lock")


def _stopper(started: threading.Event, stopped: threading.Event) -> threading.Thread:
    def stop() -> None:
        started.set()
        with workers.postgresql_stopped():
            stopped.set()

    return threading.Thread(target=stop, daemon=True)


def test_a_restart_waits_for_every_test_that_uses_the_server() -> None:
    started, stopped = threading.Event(), threading.Event()
    with workers.postgresql_in_use(), workers.postgresql_in_use():  # two tests at once
        thread = _stopper(started, stopped)
        thread.start()
        assert started.wait(5)
        assert not stopped.wait(0.3)  # the server is in use: no restart
    assert stopped.wait(5)  # both ended: the restart goes ahead
    thread.join(5)


def test_a_test_waits_while_the_server_is_stopped() -> None:
    holding, release, used = threading.Event(), threading.Event(), threading.Event()

    def restart() -> None:
        with workers.postgresql_stopped():
            holding.set()
            release.wait(5)

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    assert holding.wait(5)

    def use() -> None:
        with workers.postgresql_in_use():
            used.set()

    user = threading.Thread(target=use, daemon=True)
    user.start()
    assert not used.wait(0.3)  # stopped: the test does not start
    release.set()
    assert used.wait(5)
    thread.join(5)
    user.join(5)


def test_a_restart_that_waits_keeps_new_tests_from_starting() -> None:
    """Tests that follow one another on the other worker never keep a restart waiting:
    once it asks, a test that had not started waits behind it."""
    started, stopped, used = threading.Event(), threading.Event(), threading.Event()
    release = threading.Event()
    after_restart: list[bool] = []

    def running_test() -> None:
        with workers.postgresql_in_use():
            release.wait(5)

    first = threading.Thread(target=running_test, daemon=True)
    first.start()
    time.sleep(0.1)
    stopper = _stopper(started, stopped)
    stopper.start()
    assert started.wait(5)
    time.sleep(0.2)  # the restart now waits for the running test

    def next_test() -> None:
        with workers.postgresql_in_use():
            after_restart.append(stopped.is_set())
            used.set()

    second = threading.Thread(target=next_test, daemon=True)
    second.start()
    assert not used.wait(0.3)  # behind the restart that asked first
    release.set()
    assert stopped.wait(5) and used.wait(5)
    for thread in (first, stopper, second):
        thread.join(5)
    assert after_restart == [True]


class Item:
    def __init__(self, *marks: pytest.MarkDecorator) -> None:
        self._marks = [m.mark for m in marks]

    def iter_markers(self, name: str) -> list[pytest.Mark]:
        return [m for m in self._marks if m.name == name]


def test_a_chaos_test_is_known_by_its_group() -> None:
    group = workers.CHAOS_GROUP
    assert workers.is_chaos_test(Item(pytest.mark.xdist_group(group)))
    assert workers.is_chaos_test(Item(pytest.mark.xdist_group(name=group)))
    assert not workers.is_chaos_test(Item(pytest.mark.xdist_group("other")))
    assert not workers.is_chaos_test(Item())
