"""The job row's progress counters equal its items' real statuses after every ending."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import update

from speechbatch.adapters.models import Item, Job
from speechbatch.adapters.repositories import StaleJob, UserRecord
from speechbatch.adapters.repositories.runs import FinishedItem
from speechbatch.app import Services
from speechbatch.services import get_job, start_generation
from tests.fakes import FakeProvider, permanent
from tests.helpers import (
    ago,
    assert_counters_match,
    claim,
    concrete,
    counters,
    new_job,
    view,
    wait_for,
)

HOUR = 3600.0


def _run(svc: Services, user: UserRecord, job_id: int, regenerate: bool = False) -> Any:
    start_generation(svc.uow_factory, svc.settings, svc.runner, user, job_id, regenerate=regenerate)
    return wait_for(lambda: (j := view(svc, user, job_id))["status"] != "GENERATING" and j, 20)


def _item_ids(svc: Services, user: UserRecord, job_id: int) -> list[int]:
    return [i["id"] for i in view(svc, user, job_id)["items"]]


def _start(svc: Services, job_id: int, attempt: int, item_id: int) -> bool:
    with svc.uow_factory() as uow:
        started = uow.runs.start_item(job_id, attempt, item_id)
        uow.commit()
    return started is not None


def _done(
    svc: Services, job_id: int, attempt: int, item_id: int, path: str = "a.mp3"
) -> FinishedItem:
    with svc.uow_factory() as uow:
        won = uow.runs.finish_item(
            job_id, attempt, item_id, audio_path=path, audio_bytes=1, audio_sha256="x"
        )
        uow.commit()
    return won


def _age(svc: Services, job_id: int) -> None:
    """Make a run silent for an hour, touching timestamps only (never the counters)."""
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(update(Item).where(Item.job_id == job_id).values(updated_at=ago(HOUR)))
        uow.session.execute(update(Job).where(Job.id == job_id).values(updated_at=ago(HOUR)))
        uow.commit()


def test_counters_match_after_a_completed_run(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 6)
    job = _run(svc, admin, job_id)
    assert job["progress"] == {
        "total": 6,
        "pending": 0,
        "generating": 0,
        "done": 6,
        "error": 0,
        "stale": 0,
        "suspect": 0,
    }
    assert_counters_match(svc, job_id)


def test_counters_match_after_a_failed_item_and_its_retry(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    job_id = new_job(svc, admin, 4)
    provider.fail_texts["text 2"] = permanent()
    assert _run(svc, admin, job_id)["progress"]["error"] == 1
    assert_counters_match(svc, job_id)
    del provider.fail_texts["text 2"]
    assert _run(svc, admin, job_id)["progress"]["done"] == 4
    assert_counters_match(svc, job_id)


def test_counters_match_after_crash_recovery(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 4)
    first, second, *_ = _item_ids(svc, admin, job_id)
    assert claim(svc, admin, job_id) == 1
    assert _start(svc, job_id, 1, first) and _done(svc, job_id, 1, first)
    assert _start(svc, job_id, 1, second)  # in flight when the process died
    _age(svc, job_id)
    job = get_job(svc.uow_factory, svc.settings, admin, job_id)
    assert job["status"] == "FAILED"
    assert job["progress"] == {
        "total": 4,
        "pending": 2,
        "generating": 0,
        "done": 1,
        "error": 1,
        "stale": 0,
        "suspect": 0,
    }
    assert_counters_match(svc, job_id)


def test_counters_match_after_orphan_recovery(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 3)
    first = _item_ids(svc, admin, job_id)[0]
    assert claim(svc, admin, job_id) == 1
    assert _start(svc, job_id, 1, first)
    with svc.uow_factory() as uow:  # the job ended while its item was left GENERATING
        assert uow.runs.finish_run(job_id, 1) == "FAILED"
        uow.commit()
    assert counters(svc, job_id)["GENERATING"] == 1
    job = get_job(svc.uow_factory, svc.settings, admin, job_id)
    assert job["progress"]["generating"] == 0 and job["progress"]["error"] == 1
    assert_counters_match(svc, job_id)


def test_counters_match_after_regenerate(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 3)
    _run(svc, admin, job_id)
    assert claim(svc, admin, job_id, regenerate=True) == 2
    assert counters(svc, job_id) == {"PENDING": 3, "GENERATING": 0, "DONE": 0, "ERROR": 0}
    assert_counters_match(svc, job_id)


def test_counters_match_after_an_interrupt(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 3)
    first, second, _ = _item_ids(svc, admin, job_id)
    assert claim(svc, admin, job_id) == 1
    assert _start(svc, job_id, 1, first) and _done(svc, job_id, 1, first)
    assert _start(svc, job_id, 1, second)
    with svc.uow_factory() as uow:
        assert uow.runs.interrupt_run(job_id, 1, "interrupted: the server stopped")
        uow.commit()
    assert counters(svc, job_id) == {"PENDING": 1, "GENERATING": 0, "DONE": 1, "ERROR": 1}
    assert_counters_match(svc, job_id)


def test_fenced_zombie_writes_leave_the_counters_true(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 3)
    first, second, _ = _item_ids(svc, admin, job_id)
    assert claim(svc, admin, job_id) == 1
    assert _start(svc, job_id, 1, first)
    with svc.uow_factory() as uow:  # declared dead, then claimed again
        assert uow.recovery.recover_stale_job(
            StaleJob(job_id, 1, "lease", None), lease_seconds=0, worker_dead_seconds=0,
            message="auto-recovered: test",
        )  # fmt: skip
        uow.commit()
    assert claim(svc, admin, job_id) == 2
    assert not _done(svc, job_id, 1, first)  # the zombie's answer comes back
    assert not _start(svc, job_id, 1, second)
    assert_counters_match(svc, job_id)


def test_the_same_finish_twice_counts_once(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 2)
    first = _item_ids(svc, admin, job_id)[0]
    assert claim(svc, admin, job_id) == 1
    assert _start(svc, job_id, 1, first)
    assert _done(svc, job_id, 1, first)
    assert _done(svc, job_id, 1, first)  # a retry after a lost commit acknowledgement
    assert counters(svc, job_id)["DONE"] == 1
    assert_counters_match(svc, job_id)


def test_a_retry_restarts_error_items_without_resetting_them_at_the_claim(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    job_id = new_job(svc, admin, 2)
    provider.fail_texts["text 1"] = permanent()
    _run(svc, admin, job_id)
    del provider.fail_texts["text 1"]
    assert claim(svc, admin, job_id) == 2
    assert counters(svc, job_id)["ERROR"] == 1  # untouched by the claim
    assert _start(svc, job_id, 2, _item_ids(svc, admin, job_id)[0])
    assert counters(svc, job_id) == {"PENDING": 0, "GENERATING": 1, "DONE": 1, "ERROR": 0}
    assert_counters_match(svc, job_id)


def test_counters_match_after_a_graceful_stop_that_cut_calls_off(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    job_id = new_job(svc, admin, 8)
    provider.gate = threading.Event()
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: provider.in_flight == svc.settings.item_concurrency)
    svc.runner.drain(timeout=0.2)  # SIGTERM; the calls are still in flight past the grace
    job = get_job(svc.uow_factory, svc.settings, admin, job_id)
    assert job["runs"][-1]["outcome"] == "INTERRUPTED"
    assert job["progress"]["error"] == svc.settings.item_concurrency
    assert_counters_match(svc, job_id)
    provider.gate.set()  # their answers come back to a fenced run
    wait_for(lambda: not svc.runner.live_runs())
    assert_counters_match(svc, job_id)
