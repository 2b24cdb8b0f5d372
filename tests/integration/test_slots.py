"""Deployment-wide provider slots and pace: the statements, on both databases."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy import func, select

from speechbatch import slots as slots_module
from speechbatch.app import Services
from speechbatch.db import ago as db_ago
from speechbatch.models import ProviderSlot
from speechbatch.repositories import UserRecord
from speechbatch.repositories.slots import SlotGrant
from speechbatch.slots import Holder, ProviderGate
from tests.helpers import claim, concrete, new_job, set_worker, wait_for

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
        )
        uow.commit()
    return grant


def _release(svc: Services, grant: SlotGrant) -> bool:
    with concrete(svc.uow_factory)() as uow:
        won = uow.slots.release_slot(grant)
        uow.commit()
    return won


def _renew(svc: Services, grant: SlotGrant, job_id: int, cap: int) -> bool:
    with concrete(svc.uow_factory)() as uow:
        won = uow.slots.renewal(
            grant, job_id, capacity=cap, worker_dead_seconds=DEAD, max_hold_seconds=HOLD
        ).run(uow.session)
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


def test_a_dead_holders_slot_is_reclaimed(svc: Services, admin: UserRecord) -> None:
    dead_worker, live_worker = _worker(svc), _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    first = _acquire(svc, dead_worker, job_id, attempt, 1)
    assert first is not None
    assert _acquire(svc, live_worker, job_id, attempt, 1) is None
    set_worker(svc, dead_worker, heartbeat_at=db_ago(DEAD + 5))  # SIGKILLed: no heartbeat
    second = _acquire(svc, live_worker, job_id, attempt, 1)
    assert second is not None
    assert (second.slot, second.token) == (first.slot, first.token + 1)


def test_a_stale_grant_neither_releases_nor_keeps_the_slot(
    svc: Services, admin: UserRecord
) -> None:
    dead_worker, live_worker = _worker(svc), _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    first = _acquire(svc, dead_worker, job_id, attempt, 1)
    assert first is not None
    set_worker(svc, dead_worker, heartbeat_at=db_ago(DEAD + 5))
    assert not _renew(svc, first, job_id, 1)  # its worker looks dead: nothing to keep
    second = _acquire(svc, live_worker, job_id, attempt, 1)
    assert second is not None and second.slot == first.slot
    set_worker(svc, dead_worker, heartbeat_at=db_ago(0))  # the zombie wakes up
    assert not _renew(svc, first, job_id, 1)  # the slot is another grant's now
    assert not _release(svc, first)  # and it releases its old grant
    assert _renew(svc, second, job_id, 1)
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


def test_a_lone_job_may_take_every_slot(svc: Services, admin: UserRecord) -> None:
    worker_id = _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    grants = [_acquire(svc, worker_id, job_id, attempt, 4) for _ in range(5)]
    assert [g is not None for g in grants] == [True, True, True, True, False]
    assert sorted(g.slot for g in grants if g) == [0, 1, 2, 3]


def test_a_job_within_its_share_keeps_its_slot_for_the_next_call(
    svc: Services, admin: UserRecord
) -> None:
    worker_id = _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    grant = _acquire(svc, worker_id, job_id, attempt, 2, hold=0.5)
    assert grant is not None
    time.sleep(0.3)
    assert _renew(svc, grant, job_id, 2)
    time.sleep(0.3)  # past the first lease, within the renewed one: still held
    assert _acquire(svc, worker_id, job_id, attempt, 1, hold=0.5) is None
    assert _release(svc, grant)  # the same token still releases it
    assert not _renew(svc, grant, job_id, 2)  # released: nothing to keep


def test_a_renewal_is_refused_over_the_fair_share(svc: Services, admin: UserRecord) -> None:
    worker_id = _worker(svc)
    big, big_attempt = _running_job(svc, admin)
    first, second = (_acquire(svc, worker_id, big, big_attempt, 2) for _ in range(2))
    assert first is not None and second is not None
    _running_job(svc, admin)  # a second job runs: the share is one slot each
    assert not _renew(svc, first, big, 2)  # the big job holds two
    assert _release(svc, first)  # what the runner does then
    assert _renew(svc, second, big, 2)  # one is its share


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


def test_released_slots_are_given_back_in_one_statement(svc: Services, admin: UserRecord) -> None:
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


class _Stop(Exception):
    pass


def _gate(svc: Services, worker_id: int, cap: int) -> ProviderGate:
    settings = replace(svc.settings, provider_concurrency=cap)
    return ProviderGate(svc.runner._slot_tx, settings, lambda: worker_id)


def _waiter(
    gate: ProviderGate, job: tuple[int, int], keep_fence: Callable[[], None]
) -> tuple[threading.Thread, list[object]]:
    """A thread that waits for one of ``gate``'s slots; what it got (a grant or an error)."""
    got: list[object] = []

    def wait() -> None:
        holder = Holder(gate, *job, lambda: False, lambda r, d: None, keep_fence)
        try:
            holder.acquire()
            got.append(holder.grant)
        except BaseException as exc:
            got.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    wait_for(lambda: bool(gate._heads))
    return thread, got


def _transactions(gate: ProviderGate) -> list[str]:
    """The names of the threads that start a slot transaction through ``gate``."""
    started: list[str] = []
    tx = gate._tx

    def counting(work: Any) -> Any:
        started.append(threading.current_thread().name)
        return tx(work)

    gate._tx = counting
    return started


def test_a_release_while_a_thread_waits_rides_in_its_acquire(
    svc: Services, admin: UserRecord
) -> None:
    """Under contention a call costs one slot transaction: the waiter's acquire gives back
    the slot that the release freed, and takes it."""
    worker_id = _worker(svc)
    job = _running_job(svc, admin)
    gate = _gate(svc, worker_id, 1)
    first = Holder(gate, *job, lambda: False, lambda r, d: None, lambda: None)
    first.acquire()
    held = first.grant
    assert held is not None
    thread, got = _waiter(gate, job, lambda: None)
    started = _transactions(gate)
    first.release()
    thread.join(10)
    assert threading.current_thread().name not in started  # no transaction of its own
    assert len(got) == 1 and isinstance(got[0], SlotGrant)
    assert (got[0].slot, got[0].token) == (held.slot, held.token + 1)
    assert _in_flight(svc) == 1
    gate.release(got[0])  # nobody waits now: released at once
    assert _in_flight(svc) == 0


def test_the_last_waiter_to_leave_gives_back_what_no_try_took(
    svc: Services, admin: UserRecord
) -> None:
    """A waiter fenced right after a release was left to its next try never tries: it
    releases the slot on its way out, so the slot is not lost until its lease ends."""
    worker_id = _worker(svc)
    job = _running_job(svc, admin)
    gate = _gate(svc, worker_id, 1)
    first = Holder(gate, *job, lambda: False, lambda r, d: None, lambda: None)
    first.acquire()
    released = threading.Event()

    def keep_fence() -> None:
        if released.is_set():
            raise _Stop()

    thread, got = _waiter(gate, job, keep_fence)
    released.set()
    first.release()
    thread.join(10)
    assert len(got) == 1 and isinstance(got[0], _Stop)
    assert gate._heads == {} and gate._deferred == []
    assert _in_flight(svc) == 0


def test_a_grant_says_whether_its_job_now_holds_its_share(svc: Services, admin: UserRecord) -> None:
    worker_id = _worker(svc)
    job_id, attempt = _running_job(svc, admin)
    first, second = (_acquire(svc, worker_id, job_id, attempt, 2) for _ in range(2))
    assert first is not None and not first.at_share  # one of two
    assert second is not None and second.at_share
    other, other_attempt = _running_job(svc, admin)  # two jobs: one slot each
    assert _release(svc, second)
    third = _acquire(svc, worker_id, other, other_attempt, 2)
    assert third is not None and third.at_share


def _handed(
    svc: Services, worker_id: int, job: tuple[int, int], cap: int, handoff: SlotGrant
) -> SlotGrant | None:
    with concrete(svc.uow_factory)() as uow:
        grant = uow.slots.acquire_slot(
            worker_id, *job, capacity=cap, worker_dead_seconds=DEAD, max_hold_seconds=HOLD,
            handoff=handoff,
        )  # fmt: skip
        uow.commit()
    return grant


def test_a_handed_over_slot_is_granted_in_the_acquire(svc: Services, admin: UserRecord) -> None:
    """A slot this process gave back but has not released yet counts as free for the
    acquire that carries it: it is re-granted under a new token, even with every slot held
    and to the job that held it, at its share."""
    worker_id = _worker(svc)
    big = _running_job(svc, admin)
    small = _running_job(svc, admin)
    held = [_acquire(svc, worker_id, *big, 2), _acquire(svc, worker_id, *small, 2)]
    assert all(held)
    big_slot = held[0]
    assert big_slot is not None
    again = _handed(svc, worker_id, big, 2, big_slot)
    assert again is not None and (again.slot, again.token) == (big_slot.slot, big_slot.token + 1)
    assert again.at_share
    moved = _handed(svc, worker_id, small, 2, again)  # small holds its share: refused
    assert moved is None
    assert _in_flight(svc) == 2


def test_a_stale_hand_over_takes_nothing(svc: Services, admin: UserRecord) -> None:
    worker_id = _worker(svc)
    job = _running_job(svc, admin)
    old = _acquire(svc, worker_id, *job, 1)
    assert old is not None and _release(svc, old)
    current = _acquire(svc, worker_id, *job, 1)  # the number is another grant's now
    assert current is not None and current.slot == old.slot
    other = _running_job(svc, admin)
    assert _handed(svc, worker_id, other, 1, old) is None
    assert _renew(svc, current, job[0], 1)  # still held under its token


def _counting_tries(gate: ProviderGate) -> list[int]:
    """The jobs for which ``gate`` runs an acquire transaction, in order."""
    tries: list[int] = []
    try_acquire = gate._try_acquire

    def counting(job_id: int, attempt: int) -> Any:
        tries.append(job_id)
        return try_acquire(job_id, attempt)

    gate._try_acquire = counting  # type: ignore[method-assign]
    return tries


def test_a_release_wakes_one_poller_that_can_use_it(
    svc: Services, admin: UserRecord, monkeypatch: Any
) -> None:
    """Two slots, three running jobs (one slot each): A and B hold theirs, and a thread of
    A and one of C wait. B's release goes to C, and A, which holds its share, does not
    ask for it; A's own release then goes to A."""
    monkeypatch.setattr("speechbatch.slots.MAX_POLL_SECONDS", 30.0)  # wake-ups only
    worker_id = _worker(svc)
    a, b, c = (_running_job(svc, admin) for _ in range(3))
    gate = _gate(svc, worker_id, 2)
    holders = {}
    for job in (a, b):
        holders[job] = Holder(gate, *job, lambda: False, lambda r, d: None, lambda: None)
        holders[job].acquire()
    tries = _counting_tries(gate)
    a_waits, a_got = _waiter(gate, a, lambda: None)
    c_waits, c_got = _waiter(gate, c, lambda: None)
    # Each refused once: A as holding its share (it waits for its own release), C as
    # finding no slot free (it asks again now and then, and at any release).
    wait_for(lambda: a[0] in tries and c[0] in tries)
    holders[b].release()
    c_waits.join(10)
    assert len(c_got) == 1 and isinstance(c_got[0], SlotGrant)
    assert tries.count(a[0]) == 1  # A did not ask for B's slot
    holders[a].release()
    a_waits.join(10)
    assert len(a_got) == 1 and isinstance(a_got[0], SlotGrant)
    assert tries.count(a[0]) == 2
    assert _in_flight(svc) == 2


def test_many_waiters_of_many_jobs_all_get_their_turns_with_no_lost_wake_up(
    svc: Services, admin: UserRecord, monkeypatch: Any
) -> None:
    """20 threads of 5 jobs share 3 slots through one gate, each taking a slot 5 times.
    With the periodic retry pushed out to 30 s, only wake-ups move the waiters: a lost
    one would stall the test. The cap holds throughout, and nothing is left behind."""
    monkeypatch.setattr("speechbatch.slots.MAX_POLL_SECONDS", 30.0)
    worker_id = _worker(svc)
    jobs = [_running_job(svc, admin) for _ in range(5)]
    gate = _gate(svc, worker_id, 3)
    lock = threading.Lock()
    holding = peak = granted = 0
    errors: list[BaseException] = []

    def contender(n: int) -> None:
        nonlocal holding, peak, granted
        try:
            for k in range(5):
                holder = Holder(gate, *jobs[n % 5], lambda: False, lambda r, d: None, lambda: None)
                holder.acquire()
                with lock:
                    holding += 1
                    granted += 1
                    peak = max(peak, holding)
                time.sleep(0.001 * ((n + k) % 4))
                with lock:
                    holding -= 1
                holder.release()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=contender, args=(n,)) for n in range(20)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert granted == 100
    assert time.monotonic() - started < 25  # no thread waited for the 30 s retry
    assert 1 <= peak <= 3
    assert gate._heads == {} and gate._deferred == [] and gate._pollers == {}
    assert _in_flight(svc) == 0


def test_a_hand_over_the_woken_job_cannot_take_wakes_another(
    svc: Services, admin: UserRecord
) -> None:
    """C's poller was woken for B's slot, but C holds its share already (its slot taken
    where this process did not see it): the slot is released in C's try, and the wake-up
    goes to D's poller, which can take it, instead of waiting for D's next retry."""
    here, elsewhere = _worker(svc), _worker(svc)
    b, c, d = (_running_job(svc, admin) for _ in range(3))
    gate = _gate(svc, here, 2)  # three jobs: one slot each, and both slots held
    b_slot = _acquire(svc, here, *b, 2)
    assert b_slot is not None and _acquire(svc, elsewhere, *c, 2) is not None
    c_poller, d_poller = slots_module._Poller(c[0]), slots_module._Poller(d[0])
    gate._pollers.update({c[0]: c_poller, d[0]: d_poller})
    gate._deferred.append(b_slot)  # B gave its slot back while C and D wait
    answer = gate._try_acquire(*c)
    assert isinstance(answer, slots_module.Refused) and answer.over_share
    assert d_poller.woken.is_set() and not c_poller.woken.is_set()
    assert _in_flight(svc) == 1  # B's slot is free for D
    assert gate._try_acquire(*d) == SlotGrant(b_slot.slot, b_slot.token + 1)
