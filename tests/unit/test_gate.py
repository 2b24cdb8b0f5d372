"""The provider gate's waiting, without a database: wake-ups, the fallback poll, stopping."""

from __future__ import annotations

import threading
import time

import pytest

from speechbatch.config import Settings
from speechbatch.runner import gate as gate_module
from speechbatch.runner.gate import ProviderGate


def _gate() -> ProviderGate:
    def no_tx(work: object) -> object:
        raise AssertionError("no transaction expected")

    return ProviderGate(no_tx, Settings(), lambda: 1)  # type: ignore[arg-type]


def _waiting(
    gate: ProviderGate, job_id: int, at_share: bool
) -> tuple[threading.Thread, list[tuple[bool, float]]]:
    answers: list[tuple[bool, float]] = []
    mark = gate.mark(job_id)

    def wait() -> None:
        began = time.monotonic()
        answers.append((gate.wait(mark, job_id, at_share), time.monotonic() - began))

    thread = threading.Thread(target=wait)
    thread.start()
    return thread, answers


def test_a_waiter_wakes_at_once_when_a_slot_is_released(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_module, "POLL_SECONDS", 30.0)
    gate = _gate()
    thread, answers = _waiting(gate, 1, False)
    time.sleep(0.05)
    gate.released(2)  # any job's release frees a slot for a job under its share
    thread.join(2)
    assert answers and answers[0][0] is True and answers[0][1] < 1.0


def test_a_release_before_the_wait_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_module, "POLL_SECONDS", 30.0)
    gate = _gate()
    mark = gate.mark(1)  # taken before the try that found no slot
    gate.released(1)  # released between that try and the wait
    began = time.monotonic()
    assert gate.wait(mark, 1, False) is True
    assert time.monotonic() - began < 0.5


def test_without_a_release_the_waiter_asks_again_after_the_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gate_module, "POLL_SECONDS", 0.1)
    gate = _gate()
    thread, answers = _waiting(gate, 1, False)
    thread.join(2)
    assert answers and answers[0][0] is False and 0.09 <= answers[0][1] < 1.0


def test_a_job_at_its_share_wakes_only_for_its_own_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gate_module, "POLL_SECONDS", 30.0)
    gate = _gate()
    thread, answers = _waiting(gate, 1, True)
    gate.released(2)
    gate.released(None)
    thread.join(0.1)
    assert answers == []
    gate.released(1)
    thread.join(2)
    assert answers and answers[0][0] is True


def test_a_job_at_its_share_wakes_when_the_shares_grow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another job sent its last item (or its run ended): the slots it gives back from
    now on are the others' to take, so a waiter at its share tries again at once rather
    than at the fallback poll."""
    monkeypatch.setattr(gate_module, "POLL_SECONDS", 30.0)
    gate = _gate()
    thread, answers = _waiting(gate, 1, True)
    gate.released(2, lane_goes_on=True)
    thread.join(0.1)
    assert answers == []
    gate.share_changed()
    thread.join(2)
    assert answers and answers[0][0] is True and answers[0][1] < 1.0


def test_a_share_change_before_the_wait_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_module, "POLL_SECONDS", 30.0)
    gate = _gate()
    mark = gate.mark(1)
    gate.share_changed()
    began = time.monotonic()
    assert gate.wait(mark, 1, True) is True
    assert time.monotonic() - began < 0.5


def test_closing_the_gate_wakes_every_waiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_module, "POLL_SECONDS", 30.0)
    gate = _gate()
    waiters = [_waiting(gate, job, True) for job in (1, 2, 3)]
    time.sleep(0.05)
    gate.close()
    for thread, answers in waiters:
        thread.join(2)
        assert answers and answers[0][1] < 1.0
