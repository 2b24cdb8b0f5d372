"""The worker tier in process: web processes claim (SPEECHBATCH_RUNNER=worker), workers take.

Each "process" is an app built on the test's database (``make_svc``); the worker's tier
is ``Services.worker_tier()``, as ``flask --app wsgi worker`` builds it. The process-level
tests (real gunicorn and worker processes, signals) are in tests/e2e/test_worker_tier.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from speechbatch.adapters.models import Run
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.runner.worker import WorkerTier
from speechbatch.services import create_job, get_job, spending, start_generation
from speechbatch.services.exports import (
    NO_WORKER_MESSAGE,
    QUEUED_HOLDER_PREFIX,
    get_export,
    start_export,
)
from speechbatch.services.renders import get_render, start_render
from speechbatch.services.spending import cancel_generation
from tests.fakes import FakeProvider
from tests.helpers import LIMITS, concrete, new_job, statuses, view, wait_for
from tests.support.render_audio import Tone, finished_job

MakeSvc = Callable[..., Services]


@pytest.fixture
def web(make_svc: MakeSvc) -> Services:
    """A web process whose runs belong to the worker tier."""
    return make_svc(runner="worker")


@pytest.fixture
def make_tier(make_svc: MakeSvc) -> Iterator[Callable[..., WorkerTier]]:
    """Build worker processes (each its own app and tier); stopped after the test."""
    tiers: list[WorkerTier] = []

    def make(**changes: Any) -> WorkerTier:
        tier = make_svc(runner="worker", **changes).worker_tier()
        tiers.append(tier)
        return tier

    yield make
    for tier in tiers:
        tier.drain(5.0)


def _serve(tier: WorkerTier) -> threading.Thread:
    thread = threading.Thread(target=tier.serve, daemon=True)
    thread.start()
    return thread


def _finished(svc: Services, user: UserRecord, job_id: int, timeout: float = 20) -> dict[str, Any]:
    return wait_for(
        lambda: (j := view(svc, user, job_id))["status"] != "GENERATING" and j, timeout=timeout
    )


def _run_worker_id(svc: Services, job_id: int, attempt: int) -> int | None:
    with concrete(svc.uow_factory)() as uow:
        run = uow.session.query(Run).filter_by(job_id=job_id, attempt=attempt).one()
        return run.worker_id


def test_a_web_claim_starts_nothing_and_calls_no_provider(
    web: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    job_id = new_job(web, admin, 3)
    answer = start_generation(web.uow_factory, web.settings, web.run_control, admin, job_id)
    assert answer["status"] == "GENERATING"
    time.sleep(0.5)
    assert provider.total_calls() == 0
    assert _run_worker_id(web, job_id, answer["attempt"]) is None
    with web.uow_factory() as uow:
        waiting = uow.workers.waiting_runs(10)
    assert [(w.job_id, w.attempt) for w in waiting] == [(job_id, answer["attempt"])]


def test_a_worker_takes_the_claimed_run_and_completes_it(
    web: Services, admin: UserRecord, provider: FakeProvider, make_tier: Callable[..., WorkerTier]
) -> None:
    job_id = new_job(web, admin, 4)
    attempt = start_generation(web.uow_factory, web.settings, web.run_control, admin, job_id)[
        "attempt"
    ]
    tier = make_tier()
    assert tier.take_waiting_runs() == 1
    assert tier.take_waiting_runs() == 0  # taken: nothing waits any more
    job = _finished(web, admin, job_id)
    assert job["status"] == "COMPLETED"
    assert _run_worker_id(web, job_id, attempt) == tier.runner.worker_id()
    assert set(provider.calls.values()) == {1}
    assert len(provider.calls) == 4


def test_of_many_workers_exactly_one_takes_a_run(web: Services, admin: UserRecord) -> None:
    job_id = new_job(web, admin, 2)
    attempt = start_generation(web.uow_factory, web.settings, web.run_control, admin, job_id)[
        "attempt"
    ]
    with web.uow_factory() as uow:
        worker_ids = [uow.workers.register_worker("host", 1000 + n) for n in range(12)]
        uow.commit()
    barrier = threading.Barrier(len(worker_ids))
    won: list[int] = []

    def take(worker_id: int) -> None:
        barrier.wait()
        with web.uow_factory() as uow:
            if uow.workers.take_run(job_id, attempt, worker_id):
                uow.commit()
                won.append(worker_id)

    threads = [threading.Thread(target=take, args=(w,)) for w in worker_ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert _run_worker_id(web, job_id, attempt) == won[0]


def test_a_run_no_worker_takes_is_recovered_with_a_message(
    make_svc: MakeSvc, admin: UserRecord, provider: FakeProvider
) -> None:
    web = make_svc(runner="worker", worker_dead_seconds=0.5)
    job_id = new_job(web, admin, 2)
    attempt = start_generation(web.uow_factory, web.settings, web.run_control, admin, job_id)[
        "attempt"
    ]
    assert get_job(web.uow_factory, web.settings, admin, job_id)["status"] == "GENERATING"
    time.sleep(0.8)
    job = get_job(web.uow_factory, web.settings, admin, job_id)
    assert job["status"] == "FAILED"
    assert "no worker took it within 0.5 s" in job["error_message"]
    assert job["runs"][-1]["outcome"] == "RECOVERED"
    assert provider.total_calls() == 0
    # A worker that read the run before the recovery cannot take it any more.
    with web.uow_factory() as uow:
        worker_id = uow.workers.register_worker("late", 1)
        assert not uow.workers.take_run(job_id, attempt, worker_id)


def test_a_worker_wakes_at_a_claim_within_a_second(
    web: Services,
    admin: UserRecord,
    provider: FakeProvider,
    make_tier: Callable[..., WorkerTier],
    backend: str,
) -> None:
    tier = make_tier()
    # On PostgreSQL the claim's NOTIFY must wake it: the poll is too slow to.
    tier.poll_seconds = 30.0 if backend == "postgresql" else 0.2
    _serve(tier)
    assert tier.listening.wait(5)
    job_id = new_job(web, admin, 1)
    clicked = time.monotonic()
    start_generation(web.uow_factory, web.settings, web.run_control, admin, job_id)
    wait_for(lambda: provider.total_calls() == 1, timeout=5)
    first_call = provider.started[0][1]
    assert first_call - clicked < 1.0
    assert _finished(web, admin, job_id)["status"] == "COMPLETED"


def _held_in_flight(
    web: Services, admin: UserRecord, provider: FakeProvider, tier: WorkerTier
) -> int:
    """An 8-item job claimed by ``web`` and taken by ``tier``, whose calls in flight wait
    on the provider's gate until the test sets it; the job's id."""
    provider.gate = threading.Event()
    job_id = new_job(web, admin, 8)
    start_generation(web.uow_factory, web.settings, web.run_control, admin, job_id)
    assert tier.take_waiting_runs() == 1
    wait_for(lambda: provider.in_flight == web.settings.item_concurrency, timeout=5)
    return job_id


def test_a_graceful_stop_interrupts_and_another_worker_resumes_without_paying_twice(
    web: Services,
    admin: UserRecord,
    provider: FakeProvider,
    make_tier: Callable[..., WorkerTier],
) -> None:
    first = make_tier()
    job_id = _held_in_flight(web, admin, provider, first)
    in_flight = set(provider.calls)
    stopping = threading.Thread(target=first.drain, args=(10.0,))
    stopping.start()
    time.sleep(0.2)
    assert provider.gate is not None
    provider.gate.set()  # the calls in flight finish within the grace period
    stopping.join(15)
    job = _finished(web, admin, job_id)
    assert job["runs"][-1]["outcome"] == "INTERRUPTED"
    assert {i["text"] for i in job["items"] if i["status"] == "DONE"} == in_flight
    second = make_tier()
    assert second.runner.background_tick is not None
    second.runner.background_tick()  # the resume tick of a live worker
    job = wait_for(
        lambda: (j := view(web, admin, job_id))["status"] == "COMPLETED" and j, timeout=20
    )
    assert job["runs"][-1]["kind"] == "resume"
    assert set(provider.calls.values()) == {1}
    assert len(provider.calls) == 8


def test_a_cancel_in_a_web_process_fences_the_worker_run(
    web: Services,
    admin: UserRecord,
    provider: FakeProvider,
    make_tier: Callable[..., WorkerTier],
) -> None:
    tier = make_tier()
    job_id = _held_in_flight(web, admin, provider, tier)
    cancel_generation(web.uow_factory, web.run_control, admin, job_id)
    calls_at_cancel = provider.total_calls()
    assert provider.gate is not None
    provider.gate.set()
    wait_for(lambda: not tier.runner.live_runs(), timeout=10)
    job = view(web, admin, job_id)
    assert job["status"] == "FAILED"
    assert job["runs"][-1]["outcome"] == "CANCELLED"
    assert provider.total_calls() == calls_at_cancel
    assert all(i["status"] == "PENDING" for i in job["items"])


def test_an_export_is_built_by_the_worker_that_takes_it(
    web: Services, admin: UserRecord, make_tier: Callable[..., WorkerTier]
) -> None:
    tier = make_tier()
    job_id = new_job(web, admin, 2)
    start_generation(web.uow_factory, web.settings, web.run_control, admin, job_id)
    assert tier.take_waiting_runs() == 1
    assert _finished(web, admin, job_id)["status"] == "COMPLETED"
    export = start_export(web.uow_factory, web.settings, web.builders, admin)
    time.sleep(0.3)
    assert get_export(web.uow_factory, admin, export["id"])["status"] == "RUNNING"
    with web.uow_factory(read_only=True) as uow:
        queued = uow.exports.queued_exports(QUEUED_HOLDER_PREFIX, 10)
    assert [q.export_id for q in queued] == [export["id"]]
    results: list[int] = []
    barrier = threading.Barrier(4)

    def take() -> None:
        barrier.wait()
        results.append(web.builders.take_queued_exports())

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 0, 0, 1]
    done = wait_for(
        lambda: (
            (e := get_export(web.uow_factory, admin, export["id"]))["status"] != "RUNNING" and e
        ),
        timeout=10,
    )
    assert done["status"] == "COMPLETED"


def test_an_export_no_worker_takes_is_failed_with_a_message(
    make_svc: MakeSvc, admin: UserRecord
) -> None:
    # PostgreSQL's acquire_job_lock() takes whole seconds.
    web = make_svc(runner="worker", export_lock_ttl_seconds=1.0)
    export = start_export(web.uow_factory, web.settings, web.builders, admin)
    time.sleep(1.3)
    failed = get_export(web.uow_factory, admin, export["id"])
    assert failed["status"] == "FAILED"
    assert failed["error_message"] == NO_WORKER_MESSAGE


def test_a_worker_run_stops_at_the_budget_as_a_web_run_does(
    web: Services, admin: UserRecord, provider: FakeProvider, make_tier: Callable[..., WorkerTier]
) -> None:
    spending.set_budget(web.uow_factory, "acme", 20)  # three 6-character items fit
    job_id = new_job(web, admin, 6)
    start_generation(web.uow_factory, web.settings, web.run_control, admin, job_id)
    assert make_tier().take_waiting_runs() == 1
    job = _finished(web, admin, job_id)
    assert job["status"] == "FAILED"
    assert job["runs"][-1]["outcome"] == "OVER_BUDGET"
    assert provider.total_calls() == 3
    assert statuses(job).count("PENDING") == 3


def test_workers_share_the_deployments_provider_slots(
    make_svc: MakeSvc,
    admin: UserRecord,
    provider: FakeProvider,
    make_tier: Callable[..., WorkerTier],
) -> None:
    web = make_svc(runner="worker", provider_concurrency=2)
    tiers = [make_tier(provider_concurrency=2) for _ in range(2)]
    provider.latency = 0.05
    jobs = [
        create_job(
            web.uow_factory, admin, f"job {n}", "alloy", [f"job {n} line {i}" for i in range(8)],
            LIMITS,
        )
        for n in range(2)
    ]  # fmt: skip
    for job_id, tier in zip(jobs, tiers, strict=True):
        start_generation(web.uow_factory, web.settings, web.run_control, admin, job_id)
        assert tier.take_waiting_runs() == 1
    for job_id in jobs:
        assert _finished(web, admin, job_id)["status"] == "COMPLETED"
    assert provider.max_in_flight <= 2
    assert provider.total_calls() == 16


def test_a_render_is_built_by_the_worker_that_takes_it(web: Services, admin: UserRecord) -> None:
    """With the worker tier the web process builds no render: it holds the render's lock
    in the tier's name, and of several workers exactly one takes it over and builds it."""
    job_id = finished_job(web, admin, [Tone("One.", 0.6, 330, 0.2), Tone("Two.", 0.8, 440, 0.2)])
    render = start_render(
        web.uow_factory, web.settings, web.builders, admin, job_id, {"format": "mp3"}
    )
    time.sleep(0.3)
    assert get_render(web.uow_factory, admin, job_id, render["id"])["status"] == "RUNNING"
    results: list[int] = []
    barrier = threading.Barrier(3)

    def take() -> None:
        barrier.wait()
        results.append(web.builders.take_queued_renders())

    threads = [threading.Thread(target=take) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 0, 1]
    done = wait_for(
        lambda: (
            (r := get_render(web.uow_factory, admin, job_id, render["id"]))["status"] != "RUNNING"
            and r
        ),
        timeout=30,
    )
    assert done["status"] == "COMPLETED", done
    assert done["duration_seconds"] > 0
