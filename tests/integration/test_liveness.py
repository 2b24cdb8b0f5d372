"""One liveness rule: a run is GENERATING only while a live process is running it.

A run that a living process no longer runs (a lane that failed, a database away longer
than the process retries it) ends with its reason, or is recovered as fast as a dead
process's run; a run its process has just claimed is never recovered for the process's
own stale heartbeat. Both databases.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.runs import RunsRepository
from speechbatch.adapters.uow import RunUnit
from speechbatch.app import Services
from speechbatch.errors import DatabaseUnavailable
from speechbatch.services import get_job, start_generation
from tests.fakes import FakeProvider
from tests.helpers import ago, claim, new_job, set_worker, view, wait_for

DEAD = 2.0


def _generating(svc: Services, admin: UserRecord, job_id: int) -> bool:
    """Whether a read (which recovers dead runs first) shows the job GENERATING."""
    return bool(get_job(svc.uow_factory, svc.settings, admin, job_id)["status"] == "GENERATING")


@contextmanager
def _database_away_for_the_runner(svc: Services) -> Iterator[threading.Event]:
    """While the event is set, every transaction of the runner's items and ends fails as
    an unreachable database; its heartbeat (another path) and the test's reads go on."""
    away = threading.Event()
    factory = svc.runner.tx.uow_factory

    def unit() -> RunUnit:
        if away.is_set():
            raise DatabaseUnavailable()
        return factory()

    svc.runner.tx.uow_factory = unit
    try:
        yield away
    finally:
        svc.runner.tx.uow_factory = factory


def test_a_lane_that_fails_ends_its_run_with_the_reason(
    make_svc: Callable[..., Services],
    admin: UserRecord,
    provider: FakeProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lane that fails for another reason than a fence (here a bug in a finish) ends
    its run FAILED with that reason at once, while its process lives on: Retry works.
    (Before, the run was treated as fenced and left GENERATING for the whole lease.)"""
    svc = make_svc(worker_dead_seconds=DEAD, item_concurrency=1)
    finish_item = RunsRepository.finish_item

    def broken(self: RunsRepository, job_id: int, attempt: int, item_id: int, **kw: Any) -> Any:
        if attempt == 1:
            raise RuntimeError("disk on fire")
        return finish_item(self, job_id, attempt, item_id, **kw)

    monkeypatch.setattr(RunsRepository, "finish_item", broken)
    job_id = new_job(svc, admin, 3)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    job = wait_for(
        lambda: (j := view(svc, admin, job_id))["status"] != "GENERATING" and j, timeout=DEAD
    )
    assert job["status"] == "FAILED"
    assert job["runs"][-1]["outcome"] == "FAILED"
    assert "run failed: disk on fire" in job["error_message"]
    assert provider.total_calls() == 1  # the run started nothing after the failure
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: view(svc, admin, job_id)["status"] == "COMPLETED", timeout=10)


def test_a_run_its_process_gave_up_is_recovered_within_worker_dead_seconds(
    make_svc: Callable[..., Services], admin: UserRecord, provider: FakeProvider
) -> None:
    """The database stays away from a run longer than the process retries it (and so
    does the end of the run), while the process keeps heartbeating: once the database
    is back, a read recovers the run within WORKER_DEAD_SECONDS, and Retry works.
    (Before, the living process's heartbeat kept it GENERATING for the whole lease.)"""
    svc = make_svc(worker_dead_seconds=DEAD, db_retry_seconds=0.3, item_concurrency=1)
    svc.runner.start_background()  # the heartbeat, as in a served process
    provider.gate = threading.Event()
    job_id = new_job(svc, admin, 3)
    with _database_away_for_the_runner(svc) as away:
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
        wait_for(lambda: provider.in_flight == 1)
        away.set()
        provider.gate.set()  # the answer comes; its finish cannot be written
        wait_for(lambda: not svc.runner.live_runs(), timeout=10)
    back = time.monotonic()
    wait_for(lambda: not _generating(svc, admin, job_id), timeout=DEAD + 10)
    assert time.monotonic() - back <= DEAD + 10
    job = view(svc, admin, job_id)
    assert job["runs"][-1]["outcome"] == "RECOVERED"
    assert job["error_message"].startswith("auto-recovered")
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: view(svc, admin, job_id)["status"] == "COMPLETED", timeout=10)


def test_a_run_its_process_runs_stays_live_past_worker_dead_seconds(
    make_svc: Callable[..., Services], admin: UserRecord, provider: FakeProvider
) -> None:
    """The heartbeat stamps the beat of the runs its process runs: a run whose call takes
    several times WORKER_DEAD_SECONDS is never recovered by the reads meanwhile.

    The beat comes every WORKER_DEAD_SECONDS / 4 (0.2 s at the least): at 0.5 s a beat
    late by 0.3 s (seen on a machine at load 15-19) declared the run dead, so
    the test leaves a beat 1.1 s of slack and lasts over three times as long."""
    svc = make_svc(worker_dead_seconds=1.5)
    svc.runner.start_background()
    provider.gate = threading.Event()
    job_id = new_job(svc, admin, 1)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    try:
        until = time.monotonic() + 5.0
        while time.monotonic() < until:
            assert _generating(svc, admin, job_id)
            time.sleep(0.1)
    finally:
        provider.gate.set()
    wait_for(lambda: view(svc, admin, job_id)["status"] == "COMPLETED", timeout=10)


def test_a_run_just_claimed_is_live_even_if_its_process_heartbeat_is_stale(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    """Right after an outage a process's own heartbeat may still be stale when it claims:
    the claim gives the run a beat of its own, so a read does not recover it. (Before,
    the process recovered runs it had just claimed itself.)"""
    provider.gate = threading.Event()
    worker_id = svc.runner.worker_id()
    set_worker(svc, worker_id, heartbeat_at=ago(svc.settings.worker_dead_seconds + 60))
    job_id = new_job(svc, admin, 2)
    try:
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
        wait_for(lambda: provider.in_flight >= 1)
        assert _generating(svc, admin, job_id)
    finally:
        provider.gate.set()
    wait_for(lambda: view(svc, admin, job_id)["status"] == "COMPLETED", timeout=10)


def test_the_heartbeat_beats_only_the_runs_its_process_runs(
    svc: Services, admin: UserRecord
) -> None:
    """A run whose process no longer runs it (not in its beat) is recovered as a dead
    process's run would be, though that process heartbeats on."""
    settings = svc.settings
    worker_id = svc.runner.worker_id()
    runs = []
    for n in range(2):
        job_id = new_job(svc, admin, 1, title=f"job {n}")
        attempt = claim(svc, admin, job_id, worker_id=worker_id)
        assert attempt is not None
        runs.append((job_id, attempt))
    time.sleep(0.6)
    with svc.uow_factory() as uow:
        uow.workers.heartbeat_worker(worker_id)
        uow.workers.beat_runs(worker_id, runs[:1])
        uow.commit()
    live, given_up = (job for job, _ in runs)
    with svc.uow_factory(read_only=True) as uow:
        stale = uow.recovery.find_stale_jobs(
            lease_seconds=settings.lease_seconds, worker_dead_seconds=0.4
        )
    assert [s.job_id for s in stale] == [given_up]
    assert stale[0].reason == "worker"
    assert live != given_up
