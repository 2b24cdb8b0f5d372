"""Lease-expiry recovery: the five cases of the original incident and their neighbours."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from speechbatch.adapters.db import SQLITE_BUSY_TIMEOUT_MS, db_now_plus
from speechbatch.adapters.models import Item
from speechbatch.adapters.repositories import StaleJob, UserRecord
from speechbatch.app import Services
from speechbatch.services import get_job, recover_all
from tests.conftest import with_settings
from tests.helpers import (
    ago,
    claim,
    concrete,
    new_job,
    set_items,
    set_job,
    set_run,
    set_worker,
    statuses,
    view,
    wait_for,
)

HOUR = 3600


def _wedge(svc: Services, admin: UserRecord, n: int = 3) -> int:
    """A job whose run started an item and then went silent an hour ago."""
    job_id = new_job(svc, admin, n)
    assert claim(svc, admin, job_id) == 1
    first = view(svc, admin, job_id)["items"][0]["id"]
    set_items(svc, job_id, Item.id == first, status="GENERATING")
    set_items(svc, job_id, updated_at=ago(HOUR))
    set_job(svc, job_id, updated_at=ago(HOUR), started_at=ago(HOUR))
    return job_id


def test_wedged_job_is_recovered(svc: Services, admin: UserRecord) -> None:
    job_id = _wedge(svc, admin)
    job = get_job(svc.uow_factory, svc.settings, admin, job_id)
    assert job["status"] == "FAILED"
    assert job["error_message"].startswith("auto-recovered")
    assert statuses(job) == ["ERROR", "PENDING", "PENDING"]
    assert job["runs"][-1]["outcome"] == "RECOVERED"
    assert job["runs"][-1]["finished_at"] is not None


def test_recovered_job_can_be_claimed_again(svc: Services, admin: UserRecord) -> None:
    job_id = _wedge(svc, admin)
    before = statuses(get_job(svc.uow_factory, svc.settings, admin, job_id))
    assert claim(svc, admin, job_id) == 2
    # A retry's claim touches no item: the new run starts every item that is not DONE.
    assert statuses(view(svc, admin, job_id)) == before
    with svc.uow_factory() as uow:
        assert len(uow.runs.run_plan(job_id, 2).items) == 3


def test_items_wedged_after_job_finished_are_recovered(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin)
    claim(svc, admin, job_id)
    set_job(svc, job_id, status="FAILED", error_message="x")
    set_items(svc, job_id, status="GENERATING")
    job = get_job(svc.uow_factory, svc.settings, admin, job_id)
    assert job["status"] == "FAILED"
    assert statuses(job) == ["ERROR"] * 3
    assert all(i["error_message"].startswith("auto-recovered") for i in job["items"])


def test_freshly_started_job_is_left_alone(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin)
    claim(svc, admin, job_id)
    job = get_job(svc.uow_factory, svc.settings, admin, job_id)
    assert job["status"] == "GENERATING"
    assert job["runs"][-1]["outcome"] == "RUNNING"


def test_old_job_whose_items_are_still_updating_stays_alive(
    svc: Services, admin: UserRecord
) -> None:
    job_id = _wedge(svc, admin)
    # The job started an hour ago but an item made progress just now: slow, not dead.
    set_items(svc, job_id, Item.position == 2, updated_at=ago(1))
    job = get_job(svc.uow_factory, svc.settings, admin, job_id)
    assert job["status"] == "GENERATING"
    assert recover_all(svc.uow_factory, svc.settings) == 0


def test_recovery_backs_off_when_the_worker_finishes_first(
    svc: Services, admin: UserRecord
) -> None:
    job_id = _wedge(svc, admin)
    with svc.uow_factory() as uow:
        (stale,) = uow.recovery.find_stale_jobs(lease_seconds=30, worker_dead_seconds=30)
    # Between recovery's read and its write, the real worker finishes the run.
    set_items(svc, job_id, status="DONE")
    with svc.uow_factory() as uow:
        assert uow.runs.finish_run(job_id, 1) == "COMPLETED"
        uow.commit()
    before = view(svc, admin, job_id)
    with svc.uow_factory() as uow:
        won = uow.recovery.recover_stale_job(
            stale, lease_seconds=30, worker_dead_seconds=30, message="auto-recovered: test"
        )
        uow.commit()
    assert won is False
    assert view(svc, admin, job_id) == before
    assert before["status"] == "COMPLETED"
    assert before["runs"][-1]["outcome"] == "COMPLETED"


def test_recovery_backs_off_when_a_stamp_lands_first(svc: Services, admin: UserRecord) -> None:
    job_id = _wedge(svc, admin)
    with svc.uow_factory() as uow:
        (stale,) = uow.recovery.find_stale_jobs(lease_seconds=30, worker_dead_seconds=30)
    with svc.uow_factory() as uow:
        assert uow.runs.stamp_job_progress(job_id, 1)
        uow.commit()
    with svc.uow_factory() as uow:
        assert not uow.recovery.recover_stale_job(
            stale, lease_seconds=30, worker_dead_seconds=30, message="auto-recovered: test"
        )
        uow.commit()
    job = view(svc, admin, job_id)
    assert job["status"] == "GENERATING"
    assert statuses(job)[0] == "GENERATING"


def _until_another_writer_waits(svc: Services) -> None:
    """Return once another session waits for a lock (seen in PostgreSQL's
    pg_stat_activity); on SQLite, where a writer waiting for the write lock cannot be
    seen from outside, after a short hold."""
    if svc.engine.dialect.name != "postgresql":
        time.sleep(0.5)
        return
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )

    def someone_waits() -> bool:
        with svc.engine.connect() as watcher:  # a new snapshot of the statistics each time
            return bool(watcher.execute(waiting).scalar_one() > 0)

    wait_for(someone_waits, timeout=10)


def test_recovery_waits_for_a_concurrent_stamp_and_loses(svc: Services, admin: UserRecord) -> None:
    """A stamp holding the job's row makes recovery wait, re-check, and change nothing."""
    job_id = _wedge(svc, admin)
    with svc.uow_factory() as uow:
        (stale,) = uow.recovery.find_stale_jobs(lease_seconds=30, worker_dead_seconds=30)
    stamped = threading.Event()
    result: dict[str, bool] = {}

    def stamp() -> None:
        with svc.uow_factory() as uow:
            assert uow.runs.stamp_job_progress(job_id, 1)
            stamped.set()
            _until_another_writer_waits(svc)  # holding the row or the write lock
            uow.commit()

    def recover() -> None:
        stamped.wait(5)
        with svc.uow_factory() as uow:
            result["won"] = uow.recovery.recover_stale_job(
                stale, lease_seconds=30, worker_dead_seconds=30, message="auto-recovered: t"
            )
            uow.commit()

    threads = [threading.Thread(target=stamp), threading.Thread(target=recover)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert result == {"won": False}
    assert view(svc, admin, job_id)["status"] == "GENERATING"


def _claimed_by_a_worker(svc: Services, admin: UserRecord) -> tuple[int, int, int]:
    """A job claimed by worker host-a:4242: (job, attempt, worker)."""
    job_id = new_job(svc, admin)
    with concrete(svc.uow_factory)() as uow:
        worker_id = uow.workers.register_worker("host-a", 4242)
        uow.commit()
    attempt = claim(svc, admin, job_id, worker_id=worker_id)
    assert attempt is not None
    return job_id, attempt, worker_id


def test_dead_worker_is_found_by_its_heartbeat(svc: Services, admin: UserRecord) -> None:
    job_id, attempt, worker_id = _claimed_by_a_worker(svc, admin)
    # Progress is recent (well within the 30 s lease) but the worker went silent: neither
    # its own row nor its run's beat has been stamped for longer than WORKER_DEAD_SECONDS.
    set_worker(svc, worker_id, heartbeat_at=ago(31))
    set_run(svc, job_id, attempt, heartbeat_at=ago(31))
    job = get_job(svc.uow_factory, svc.settings, admin, job_id)
    assert job["status"] == "FAILED"
    assert "host-a:4242 stopped heartbeating" in job["error_message"]
    assert job["runs"][-1]["outcome"] == "RECOVERED"


def test_a_run_a_live_worker_no_longer_beats_for_is_recovered(
    svc: Services, admin: UserRecord
) -> None:
    """Liveness is the run's: its worker heartbeats on, but no longer for this run."""
    job_id, attempt, _ = _claimed_by_a_worker(svc, admin)
    set_run(svc, job_id, attempt, heartbeat_at=ago(31))
    job = get_job(svc.uow_factory, svc.settings, admin, job_id)
    assert job["status"] == "FAILED"
    assert job["runs"][-1]["outcome"] == "RECOVERED"


def test_live_worker_keeps_its_job(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin)
    with concrete(svc.uow_factory)() as uow:
        worker_id = uow.workers.register_worker("host-a", 4242)
        uow.commit()
    claim(svc, admin, job_id, worker_id=worker_id)
    set_worker(svc, worker_id, heartbeat_at=ago(5))
    assert get_job(svc.uow_factory, svc.settings, admin, job_id)["status"] == "GENERATING"


def test_job_whose_items_are_all_done_recovers_as_completed(
    svc: Services, admin: UserRecord
) -> None:
    job_id = _wedge(svc, admin)
    set_items(svc, job_id, status="DONE", audio_path="jobs/x.mp3", updated_at=ago(HOUR))
    job = get_job(svc.uow_factory, svc.settings, admin, job_id)
    assert job["status"] == "COMPLETED"
    assert job["runs"][-1]["outcome"] == "RECOVERED"


def test_list_recovers_before_answering(svc: Services, admin: UserRecord, client, auth) -> None:  # type: ignore[no-untyped-def]
    job_id = _wedge(svc, admin)
    body = client.get("/api/jobs", headers=auth).get_json()
    (summary,) = [j for j in body["jobs"] if j["id"] == job_id]
    assert summary["status"] == "FAILED"
    assert "items" not in summary and "runs" not in summary


def test_list_recovers_orphan_items_before_answering(  # type: ignore[no-untyped-def]
    svc: Services, admin: UserRecord, client, auth
) -> None:
    job_id = new_job(svc, admin)
    claim(svc, admin, job_id)
    set_job(svc, job_id, status="FAILED", error_message="x")
    set_items(svc, job_id, status="GENERATING")
    body = client.get("/api/jobs", headers=auth).get_json()
    (summary,) = [j for j in body["jobs"] if j["id"] == job_id]
    assert summary["progress"]["generating"] == 0
    assert summary["progress"]["error"] == 3


def test_recover_command_sweeps_every_organization(app, svc: Services, admin: UserRecord) -> None:  # type: ignore[no-untyped-def]
    _wedge(svc, admin)
    result = app.test_cli_runner().invoke(args=["recover"])
    assert result.exit_code == 0, result.output
    assert "recovered 1 job(s)" in result.output


def _silent_for(svc: Services, job_id: int, seconds: float) -> None:
    """Make the job's last progress (its own and its items') ``seconds`` old, by the
    database's clock."""
    set_items(svc, job_id, updated_at=db_now_plus(-seconds))
    set_job(svc, job_id, updated_at=db_now_plus(-seconds))


def test_short_lease_recovers_a_silent_run(svc: Services, admin: UserRecord) -> None:
    """The lease setting decides, on the database's clock: a run silent for 3.5 s is
    alive under a 30-s lease and dead under a 2.5-s one (no sleeping up to the boundary:
    the run's progress is moved back in the database instead)."""
    short = with_settings(
        svc.settings, lease_seconds=2.5, tts_timeout_seconds=0.5, tts_max_attempts=2
    )
    job_id = new_job(svc, admin)
    claim(svc, admin, job_id)
    _silent_for(svc, job_id, 1.5)
    assert get_job(svc.uow_factory, short, admin, job_id)["status"] == "GENERATING"
    _silent_for(svc, job_id, 3.5)
    assert get_job(svc.uow_factory, svc.settings, admin, job_id)["status"] == "GENERATING"
    job = get_job(svc.uow_factory, short, admin, job_id)
    assert job["status"] == "FAILED" and job["runs"][-1]["outcome"] == "RECOVERED"


def test_read_answers_while_another_process_holds_the_row(svc: Services, admin: UserRecord) -> None:
    """A dead-looking job whose row another transaction holds (on SQLite: the database's
    write lock, as a process frozen inside a write leaves it) is answered as it is within
    about ``lock_timeout`` (2 s), not after SQLite's 30-s busy timeout; a later read recovers."""
    job_id = _wedge(svc, admin)
    holder = svc.engine.connect()
    tx = holder.begin()  # on SQLite, BEGIN IMMEDIATE: the write lock
    try:
        if svc.engine.dialect.name == "postgresql":
            holder.exec_driver_sql(f"SELECT id FROM jobs WHERE id = {job_id} FOR UPDATE")
        else:
            holder.exec_driver_sql(f"UPDATE jobs SET title = title WHERE id = {job_id}")
        started = time.monotonic()
        job = get_job(svc.uow_factory, svc.settings, admin, job_id)
        waited = time.monotonic() - started
        assert job["status"] == "GENERATING"  # answered as it is, not an error
        assert waited < 5, f"the read waited {waited:.1f} s for the held row"
    finally:
        tx.rollback()
        holder.close()
    assert get_job(svc.uow_factory, svc.settings, admin, job_id)["status"] == "FAILED"


def test_a_busy_recovery_leaves_later_writers_their_long_wait(
    svc: Services, admin: UserRecord
) -> None:
    """The short wait is the read's recovery's only: a pooled connection it used waits the
    full busy timeout again for the next ordinary writer (SQLite keeps it per connection)."""
    with svc.uow_factory.impatient_writer() as uow:
        uow.commit()
    with concrete(svc.uow_factory)() as uow:
        if svc.engine.dialect.name == "sqlite":
            busy_ms: int = uow.session.execute(text("PRAGMA busy_timeout")).scalar_one()
            assert busy_ms == SQLITE_BUSY_TIMEOUT_MS
        else:
            lock_ms: str = uow.session.execute(text("SHOW lock_timeout")).scalar_one()
            assert lock_ms == "2s"


def test_stale_check_is_one_candidate_per_dead_job(svc: Services, admin: UserRecord) -> None:
    for _ in range(3):
        _wedge(svc, admin)
    with svc.uow_factory() as uow:
        stale = uow.recovery.find_stale_jobs(lease_seconds=30, worker_dead_seconds=30)
    assert len(stale) == 3
    assert all(isinstance(s, StaleJob) and s.reason == "lease" for s in stale)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_read_answers_while_another_connection_holds_the_write_lock(
    svc: Services, admin: UserRecord
) -> None:
    """Reads begin deferred on SQLite, so a stalled writer cannot hold them up."""
    job_id = new_job(svc, admin)
    holder = svc.engine.connect()
    tx = holder.begin()  # BEGIN IMMEDIATE: the database's write lock
    try:
        holder.exec_driver_sql("UPDATE jobs SET title = title")
        started = time.monotonic()
        assert get_job(svc.uow_factory, svc.settings, admin, job_id)["status"] == "PENDING"
        assert time.monotonic() - started < 2
    finally:
        tx.rollback()
        holder.close()
