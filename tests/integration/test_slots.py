"""Deployment-wide provider slots and pace: the statements, on both databases."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import func, select, text, update

from speechbatch.adapters.db import ago as db_ago
from speechbatch.adapters.db import make_engine, make_session_factory
from speechbatch.adapters.models import CastVoice, ProviderSlot
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.slots import SlotGrant
from speechbatch.adapters.uow import SessionUowFactory
from speechbatch.app import Services
from speechbatch.runner import gate as gate_module
from speechbatch.runner.gate import POLL_SECONDS, ProviderGate
from speechbatch.runner.transactions import Transactions
from tests.helpers import claim, concrete, new_job, set_job, set_worker, wait_for

DEAD = 30.0
HOLD = 300.0


def _worker(svc: Services) -> int:
    with concrete(svc.uow_factory)() as uow:
        worker_id = uow.workers.register_worker("test-host", 4242)
        uow.commit()
    return worker_id


def _running_job(svc: Services, admin: UserRecord) -> tuple[int, int]:
    job_id = new_job(svc, admin, 1)
    attempt = claim(svc, admin, job_id)
    assert attempt is not None
    return job_id, attempt


def _acquire(
    svc: Services, worker_id: int, job_id: int, attempt: int, cap: int, **kw: Any
) -> SlotGrant | None:
    with concrete(svc.uow_factory)() as uow:
        grant = uow.slots.acquire_slot(
            worker_id,
            job_id,
            attempt,
            capacity=cap,
            worker_dead_seconds=kw.get("dead", DEAD),
            max_hold_seconds=kw.get("hold", HOLD),
            first=kw.get("first", 0),
            sharing=kw.get("sharing", ("", ())),
        )
        uow.commit()
    return grant


def _release(svc: Services, grant: SlotGrant, job_id: int | None = None) -> bool:
    with concrete(svc.uow_factory)() as uow:
        won = uow.slots.release_slot(grant, job_id)
        uow.commit()
    return won


def _in_flight(svc: Services) -> int:
    with svc.uow_factory(read_only=True) as uow:
        return uow.slots.slots_in_flight(worker_dead_seconds=DEAD, max_hold_seconds=HOLD)


def test_concurrent_acquirers_never_exceed_the_cap(svc: Services, admin: UserRecord) -> None:
    cap, threads, rounds = 3, 10, 6
    worker_id = _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    lock = threading.Lock()
    holding = peak = granted = 0
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def acquirer() -> None:
        nonlocal holding, peak, granted
        try:
            start.wait()
            for _ in range(rounds):
                grant = None
                while grant is None:
                    grant = _acquire(svc, worker_id, job_id, attempt, cap)
                    if grant is None:
                        time.sleep(0.005)
                with lock:
                    holding += 1
                    granted += 1
                    peak = max(peak, holding)
                time.sleep(0.01)
                with lock:
                    holding -= 1
                assert _release(svc, grant)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=acquirer) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(120)
    assert errors == []
    assert granted == threads * rounds
    assert 1 <= peak <= cap
    assert _in_flight(svc) == 0


def _age_slots(svc: Services, seconds: float) -> None:
    """Move every slot's grant back in time (a holder dead for that long took it then)."""
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(update(ProviderSlot).values(acquired_at=db_ago(seconds)))
        uow.commit()


def test_a_slot_renewed_while_its_workers_beat_is_stale_is_not_reclaimed(
    svc: Services, admin: UserRecord
) -> None:
    """Right after a database outage longer than WORKER_DEAD_SECONDS every beat is stale,
    but a holder that renews its slot (right before its send) has just shown it is alive:
    nobody else may take that slot and send too (found by tests/chaos/test_faults.py, seed
    2: a stall of 2 s, then 3 calls in flight on 2 slots)."""
    holder, other = _worker(svc), _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    grant = _acquire(svc, holder, job_id, attempt, 1)
    assert grant is not None
    _age_slots(svc, DEAD + 5)
    set_worker(svc, holder, heartbeat_at=db_ago(DEAD + 5))  # the outage: no beat came
    with concrete(svc.uow_factory)() as uow:
        assert uow.slots.renew_slot(grant)  # the holder is back first, and sends
        uow.commit()
    assert _acquire(svc, other, job_id, attempt, 1) is None
    assert _in_flight(svc) == 1


def test_a_dead_holders_slot_is_reclaimed(svc: Services, admin: UserRecord) -> None:
    dead_worker, live_worker = _worker(svc), _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    first = _acquire(svc, dead_worker, job_id, attempt, 1)
    assert first is not None
    assert _acquire(svc, live_worker, job_id, attempt, 1) is None
    set_worker(svc, dead_worker, heartbeat_at=db_ago(DEAD + 5))  # SIGKILLed: no heartbeat
    _age_slots(svc, DEAD + 5)
    second = _acquire(svc, live_worker, job_id, attempt, 1)
    assert second is not None
    assert (second.slot, second.token) == (first.slot, first.token + 1)


def test_a_dead_holders_slot_is_reclaimed_while_a_live_worker_holds_another(
    svc: Services, admin: UserRecord
) -> None:
    """The dead holder's own worker decides, not whether any holder is alive."""
    dead_worker, live_worker = _worker(svc), _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    held = _acquire(svc, live_worker, job_id, attempt, 2)
    lost = _acquire(svc, dead_worker, job_id, attempt, 2)
    assert held is not None and lost is not None
    set_worker(svc, dead_worker, heartbeat_at=db_ago(DEAD + 5))
    _age_slots(svc, DEAD + 5)
    again = _acquire(svc, live_worker, job_id, attempt, 2)
    assert again is not None
    assert (again.slot, again.token) == (lost.slot, lost.token + 1)
    assert _release(svc, held)


def test_a_stale_grant_does_not_release_the_slot(svc: Services, admin: UserRecord) -> None:
    dead_worker, live_worker = _worker(svc), _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    first = _acquire(svc, dead_worker, job_id, attempt, 1)
    assert first is not None
    set_worker(svc, dead_worker, heartbeat_at=db_ago(DEAD + 5))
    _age_slots(svc, DEAD + 5)
    second = _acquire(svc, live_worker, job_id, attempt, 1)
    assert second is not None and second.slot == first.slot
    set_worker(svc, dead_worker, heartbeat_at=db_ago(0))  # the zombie wakes up
    assert not _release(svc, first)  # the slot is another grant's now
    assert _in_flight(svc) == 1
    assert _acquire(svc, live_worker, job_id, attempt, 1) is None
    assert _release(svc, second)
    assert _in_flight(svc) == 0


def test_a_stopped_workers_slot_is_free_at_once(svc: Services, admin: UserRecord) -> None:
    stopped, other = _worker(svc), _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    assert _acquire(svc, stopped, job_id, attempt, 1) is not None
    with concrete(svc.uow_factory)() as uow:
        uow.workers.mark_worker_stopped(stopped)
        uow.commit()
    assert _acquire(svc, other, job_id, attempt, 1) is not None


def test_a_slot_held_past_any_call_is_reclaimed(svc: Services, admin: UserRecord) -> None:
    worker_id = _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    assert _acquire(svc, worker_id, job_id, attempt, 1, hold=0.2) is not None
    assert _acquire(svc, worker_id, job_id, attempt, 1, hold=0.2) is None
    time.sleep(0.3)  # its release was lost (a database outage): the slot comes back
    assert _acquire(svc, worker_id, job_id, attempt, 1, hold=0.2) is not None


def test_a_fenced_run_gets_no_slot(svc: Services, admin: UserRecord) -> None:
    worker_id = _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    assert _acquire(svc, worker_id, job_id, attempt - 1, 4) is None
    assert _acquire(svc, worker_id, job_id + 1000, 1, 4) is None


def test_a_job_holding_its_fair_share_waits_for_the_others(
    svc: Services, admin: UserRecord
) -> None:
    worker_id = _worker(svc)
    big, big_attempt = _running_job(svc, admin)
    small, small_attempt = _running_job(svc, admin)
    # Two running jobs share four slots: two each, whoever asked first.
    assert _acquire(svc, worker_id, big, big_attempt, 4) is not None
    assert _acquire(svc, worker_id, big, big_attempt, 4) is not None
    assert _acquire(svc, worker_id, big, big_attempt, 4) is None
    assert _acquire(svc, worker_id, small, small_attempt, 4) is not None
    assert _acquire(svc, worker_id, small, small_attempt, 4) is not None
    assert _in_flight(svc) == 4


def test_a_job_whose_cast_speaks_through_a_provider_shares_that_providers_slots(
    svc: Services, admin: UserRecord
) -> None:
    worker_id = _worker(svc)
    narrated, narrated_attempt = _running_job(svc, admin)
    cast, cast_attempt = _running_job(svc, admin)
    set_job(svc, narrated, voice="google:en-US-Neural2-C")
    # The other job's narrator is the default provider's; one of its speakers is Google's.
    with concrete(svc.uow_factory)() as uow:
        uow.session.add(CastVoice(job_id=cast, speaker="Bob", voice="google:en-US-Neural2-C"))
        uow.commit()
    google = {"first": 200_000, "sharing": ("google:", ())}
    # Both jobs speak through Google: its two slots are one each, whoever asked first.
    assert _acquire(svc, worker_id, narrated, narrated_attempt, 2, **google) is not None
    assert _acquire(svc, worker_id, narrated, narrated_attempt, 2, **google) is None
    assert _acquire(svc, worker_id, cast, cast_attempt, 2, **google) is not None
    # The default provider's slots: only the cast job speaks through them (its narrator).
    default = {"sharing": ("", ("google:",))}
    assert _acquire(svc, worker_id, cast, cast_attempt, 2, **default) is not None
    assert _acquire(svc, worker_id, cast, cast_attempt, 2, **default) is not None


def test_a_lone_job_may_take_every_slot(svc: Services, admin: UserRecord) -> None:
    worker_id = _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    grants = [_acquire(svc, worker_id, job_id, attempt, 4) for _ in range(5)]
    assert [g is not None for g in grants] == [True, True, True, True, False]
    assert sorted(g.slot for g in grants if g) == [0, 1, 2, 3]


def test_the_pace_books_starts_one_interval_apart(svc: Services) -> None:
    waits = []
    for _ in range(2):
        with concrete(svc.uow_factory)() as uow:
            waits.append(uow.slots.reserve_start(0.5).wait_seconds)
            uow.commit()
    assert waits[0] is not None and waits[0] <= 0.05
    assert waits[1] is not None and 0.4 <= waits[1] <= 0.55
    with concrete(svc.uow_factory)() as uow:  # two intervals ahead: ask again later
        answer = uow.slots.reserve_start(0.5)
        uow.commit()
    assert answer.wait_seconds is None and answer.paused_for_seconds > 0.4


def test_a_pause_holds_every_start_back(svc: Services) -> None:
    with concrete(svc.uow_factory)() as uow:
        uow.slots.pause_starts(5.0)
        uow.commit()
    with concrete(svc.uow_factory)() as uow:
        slots = uow.slots
        assert 4.5 <= slots.paused_for() <= 5.0
        answer = slots.reserve_start(0.1)
        uow.commit()
    assert answer.wait_seconds is None and answer.paused_for_seconds > 4.5


def test_no_pause_by_default(svc: Services) -> None:
    with svc.uow_factory(read_only=True) as uow:
        assert uow.slots.paused_for() == 0.0


def test_slot_rows_are_kept_per_number(svc: Services, admin: UserRecord) -> None:
    """Releases keep the row (re-granted with a new token), so the table stays small."""
    worker_id = _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    tokens = []
    for _ in range(5):
        grant = _acquire(svc, worker_id, job_id, attempt, 1)
        assert grant is not None and grant.slot == 0
        tokens.append(grant.token)
        assert _release(svc, grant)
    with concrete(svc.uow_factory)(read_only=True) as uow:
        rows = uow.session.execute(select(func.count()).select_from(ProviderSlot)).scalar_one()
    assert rows == 1
    assert tokens == [1, 2, 3, 4, 5]


def test_only_slots_still_held_under_their_token_are_released(
    svc: Services, admin: UserRecord
) -> None:
    worker_id = _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    grants = [_acquire(svc, worker_id, job_id, attempt, 3) for _ in range(3)]
    assert all(grants)
    stale = grants[0]
    assert stale is not None and _release(svc, stale)
    with concrete(svc.uow_factory)() as uow:
        # Out of order, and one already released: only the two held under their token win.
        won = uow.slots.release_slots([g for g in reversed(grants) if g is not None])
        uow.commit()
    assert won == 2
    assert _in_flight(svc) == 0


def _gate(svc: Services, worker_id: int, cap: int) -> ProviderGate:
    settings = replace(svc.settings, provider_concurrency=cap)
    return ProviderGate(svc.runner._slot_tx, settings, lambda: worker_id)


@contextlib.contextmanager
def _gate_of_another_process(svc: Services, worker_id: int, url: str) -> Iterator[ProviderGate]:
    """A gate with an engine and a listener of its own, as another process has."""
    settings = replace(svc.settings, provider_concurrency=1)
    engine = make_engine(url)
    factory = SessionUowFactory(make_session_factory(engine), make_session_factory(engine))
    tx = Transactions(factory, lambda: False, svc.settings.db_retry_seconds)
    listen = None
    if engine.dialect.name == "postgresql":
        listen = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    gate = ProviderGate(
        lambda work: tx(lambda uow: work(uow.slots)), settings, lambda: worker_id, listen
    )
    try:
        yield gate
    finally:
        gate.close()
        engine.dispose()


def test_a_release_in_another_process_wakes_a_waiter_within_milliseconds(
    svc: Services, admin: UserRecord, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A waiter of one gate (its own engine and listener, as another process would have)
    gets the slot that another engine's transaction releases: on PostgreSQL within
    100 ms of the release's commit (LISTEN/NOTIFY); on SQLite at the fallback poll."""
    postgresql = svc.engine.dialect.name == "postgresql"
    if postgresql:  # no fallback poll: only the notification can wake the waiter in time
        monkeypatch.setattr(gate_module, "POLL_SECONDS", 30.0)
    worker_id = _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    held = _acquire(svc, worker_id, job_id, attempt, 1)
    assert held is not None
    with _gate_of_another_process(svc, worker_id, database_url) as gate:
        got: list[float] = []

        def waiter() -> None:
            while True:
                mark = gate.mark(job_id)  # (starts the listener)
                if gate._tx(lambda slots: gate.take(slots, job_id, attempt)) is not None:
                    got.append(time.monotonic())
                    return
                gate.wait(mark, job_id, False)

        thread = threading.Thread(target=waiter)
        thread.start()
        wait_for(lambda: _listening(svc))
        time.sleep(0.2)  # the waiter waits now
        assert _release(svc, held, job_id)
        released_at = time.monotonic()
        thread.join(10)
        assert got, "the waiter never got the slot"
        delay = got[0] - released_at
        if postgresql:
            assert delay < 0.1, delay
        else:
            assert delay < POLL_SECONDS + 0.5, delay


def _listening(svc: Services) -> bool:
    """Whether a connection of this test's database LISTENs for slot releases."""
    if svc.engine.dialect.name != "postgresql":
        return True
    with svc.engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                )
            ).scalar()
        )


def test_a_waiter_of_a_job_at_its_share_wakes_only_for_its_own_release(svc: Services) -> None:
    """Fairness: a job that holds its fair share can only use one of its own slots, so
    another job's release does not wake it; its own does, at once."""
    gate = _gate(svc, 0, 2)
    mark = gate.mark(7)
    woke: list[bool] = []
    thread = threading.Thread(target=lambda: woke.append(gate.wait(mark, 7, True)))
    thread.start()
    gate.released(8)
    time.sleep(0.05)
    assert woke == []
    gate.released(7)
    thread.join(2)
    assert woke == [True]


def _start_only_item(svc: Services, job_id: int, attempt: int) -> bool:
    """Start the job's only item as a run does; whether the job has nothing left to start."""
    with concrete(svc.uow_factory)() as uow:
        item_id = uow.runs.run_plan(job_id, attempt).items[0][0]
        started = uow.runs.start_item(job_id, attempt, item_id)
        uow.commit()
    assert started is not None
    return started.drained


def test_a_job_with_nothing_left_to_start_leaves_its_share_to_the_others(
    svc: Services, admin: UserRecord
) -> None:
    """Fairness counts only the jobs that still have items to start: once a job's last
    item is in flight, the slots it gives back are the other jobs' to take."""
    worker_id = _worker(svc)
    big, big_attempt = _running_job(svc, admin)
    small, small_attempt = _running_job(svc, admin)
    assert _acquire(svc, worker_id, big, big_attempt, 4) is not None
    assert _acquire(svc, worker_id, big, big_attempt, 4) is not None
    assert _acquire(svc, worker_id, big, big_attempt, 4) is None  # two jobs: two each
    assert _start_only_item(svc, small, small_attempt) is True
    assert _acquire(svc, worker_id, small, small_attempt, 4) is not None  # its last call
    assert _acquire(svc, worker_id, big, big_attempt, 4) is not None  # the big job's share: 4
    assert _in_flight(svc) == 4


def test_a_job_drained_in_another_process_wakes_a_waiter_at_its_share(
    svc: Services, admin: UserRecord, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A waiter whose job holds its share waits only for its own releases, or for the
    shares to grow: on PostgreSQL the start of another job's last item tells every
    process at its commit (within 100 ms); on SQLite the fallback poll finds it."""
    postgresql = svc.engine.dialect.name == "postgresql"
    if postgresql:  # no fallback poll: only the notification can wake the waiter in time
        monkeypatch.setattr(gate_module, "POLL_SECONDS", 30.0)
    worker_id = _worker(svc)
    big, big_attempt = _running_job(svc, admin)
    small, small_attempt = _running_job(svc, admin)
    with _gate_of_another_process(svc, worker_id, database_url) as gate:
        woke: list[tuple[bool, float]] = []

        def waiter() -> None:
            mark = gate.mark(big)  # (starts the listener)
            woke.append((gate.wait(mark, big, True), time.monotonic()))

        thread = threading.Thread(target=waiter)
        thread.start()
        wait_for(lambda: _listening(svc))
        time.sleep(0.2)  # the waiter waits now
        assert _start_only_item(svc, small, small_attempt) is True
        drained_at = time.monotonic()
        thread.join(10)
        assert woke, "the waiter never woke"
        delay = woke[0][1] - drained_at
        if postgresql:
            assert woke[0][0] is True and delay < 0.1, woke
        else:
            assert delay < POLL_SECONDS + 0.5, delay
    assert _acquire(svc, worker_id, big, big_attempt, 2) is not None
    assert _acquire(svc, worker_id, big, big_attempt, 2) is not None
