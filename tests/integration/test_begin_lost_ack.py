"""A lost acknowledgement of ``begin``'s commit (found by tests/chaos/test_faults.py, seed 1:
the ledger billed one text more than the provider received). Both databases.

The begin transaction took the item PENDING -> GENERATING, a slot and the reservation,
and committed; the acknowledgement was lost, so the runner retried the transaction. The
retry must not leave the first commit's reservation billed for a call that is never sent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.ledger import SpendingRepository
from speechbatch.adapters.uow import Writer
from speechbatch.app import Services
from speechbatch.errors import DatabaseUnavailable
from speechbatch.services import spending, start_generation
from tests.fakes import FakeProvider
from tests.helpers import new_job, view, wait_for

RESERVED = "test-reserved"


@pytest.fixture
def lose_begin_acks(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], list[int]]:
    """The first ``n`` commits of a begin (a unit that reserved characters) happen, then
    raise as if their acknowledgement were lost; returns the list of those fired."""

    def lose(n: int) -> list[int]:
        fired: list[int] = []
        reserve, commit = SpendingRepository.reserve_characters, Writer.commit

        def marking(self: SpendingRepository, *args: Any, **kw: Any) -> Any:
            reservation = reserve(self, *args, **kw)
            if reservation is not None:
                self.session.info[RESERVED] = True
            return reservation

        def committing(self: Writer) -> None:
            commit(self)
            if self.session.info.pop(RESERVED, False) and len(fired) < n:
                fired.append(1)
                raise DatabaseUnavailable()

        monkeypatch.setattr(SpendingRepository, "reserve_characters", marking)
        monkeypatch.setattr(Writer, "commit", committing)
        return fired

    return lose


@pytest.mark.parametrize("lost", [1, 3])
def test_a_lost_begin_acknowledgement_bills_only_what_was_sent(
    lost: int,
    make_svc: Callable[..., Services],
    admin: UserRecord,
    provider: FakeProvider,
    lose_begin_acks: Callable[[int], list[int]],
) -> None:
    """Before the fix: the job FAILED with item 1 left GENERATING, and its characters
    billed for a call never sent (billed 12, received 6)."""
    svc = make_svc(item_concurrency=1)
    job_id = new_job(svc, admin, 4)
    fired = lose_begin_acks(lost)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: len(fired) == lost and not svc.runner.live_runs(), timeout=20)
    job = view(svc, admin, job_id)
    received = sum(len(t) * n for t, n in provider.calls.items())
    usage = spending.usage_view(svc.uow_factory, svc.settings, admin)
    summary = (job["status"], [(i["status"], i["error_message"]) for i in job["items"]])
    assert summary == ("COMPLETED", [("DONE", None)] * 4)
    assert provider.total_calls() == 4
    assert (usage["billed_characters"], usage["in_doubt_characters"]) == (received, 0), summary


def test_a_lost_begin_acknowledgement_then_an_outage_refunds_once_the_database_returns(
    make_svc: Callable[..., Services],
    admin: UserRecord,
    provider: FakeProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The begin's commit happened, its acknowledgement was lost, and the database then
    stayed away longer than the process retries it: the lane gives up without knowing
    whether it holds a slot and a reservation. Once the database is back, the background
    tick gives both back (compare-and-sets): nothing stays billed for a call never sent.
    (Before: those characters stayed billed, seed 2 of the fault suite.)"""
    svc = make_svc(db_retry_seconds=0.3, item_concurrency=1)
    svc.runner.start_background(lambda: None)  # the tick that pays what is owed
    reserve, commit = SpendingRepository.reserve_characters, Writer.commit
    away = threading.Event()

    def marking(self: SpendingRepository, *args: Any, **kw: Any) -> Any:
        reservation = reserve(self, *args, **kw)
        self.session.info[RESERVED] = reservation is not None
        return reservation

    def committing(self: Writer) -> None:
        if away.is_set():
            self.rollback()
            raise DatabaseUnavailable("injected: the database is away")
        commit(self)
        if self.session.info.pop(RESERVED, False):
            away.set()  # this commit happened; nobody hears of it, nor reaches the database
            raise DatabaseUnavailable("injected: the acknowledgement was lost")

    monkeypatch.setattr(SpendingRepository, "reserve_characters", marking)
    monkeypatch.setattr(Writer, "commit", committing)
    job_id = new_job(svc, admin, 2)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: away.is_set() and not svc.runner.live_runs(), timeout=20)
    assert spending.usage_view(svc.uow_factory, svc.settings, admin)["billed_characters"] == 6
    away.clear()  # the database is back
    wait_for(
        lambda: spending.usage_view(svc.uow_factory, svc.settings, admin)["billed_characters"] == 0,
        timeout=10,
    )
    assert provider.total_calls() == 0
