"""The runner end to end with a fake provider that counts billed calls."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from speechbatch import create_app
from speechbatch.adapters.providers.openai import OpenAIProvider
from speechbatch.adapters.repositories import StaleJob, UserRecord
from speechbatch.adapters.repositories.runs import RunsRepository
from speechbatch.app import Services
from speechbatch.config import Settings
from speechbatch.runner import item as item_module
from speechbatch.runner.attempt import Attempt
from speechbatch.runner.steps import Steps
from speechbatch.services import get_job, start_generation
from tests.conftest import STORAGES, close_services, services, with_settings
from tests.fakes import FakeProvider, fake_audio, permanent, retryable
from tests.helpers import new_job, statuses, view, wait_for
from tests.support.fake_provider import FakeProvider as HttpFakeProvider
from tests.support.storages import read_stored, stored_keys


def _run(svc: Services, user: UserRecord, job_id: int, regenerate: bool = False) -> dict[str, Any]:
    start_generation(svc.uow_factory, svc.settings, svc.runner, user, job_id, regenerate=regenerate)
    return wait_for(
        lambda: (j := view(svc, user, job_id))["status"] != "GENERATING" and j, timeout=20
    )


def _audio_files(svc: Services) -> list[str]:
    return stored_keys(svc.storage)


@pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
def test_run_completes_every_item_with_audio(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    job_id = new_job(svc, admin, 6)
    job = _run(svc, admin, job_id)
    assert job["status"] == "COMPLETED"
    assert job["progress"] == {
        "total": 6,
        "pending": 0,
        "generating": 0,
        "done": 6,
        "error": 0,
        "stale": 0,
        "suspect": 0,
    }
    assert job["runs"][-1]["outcome"] == "COMPLETED"
    assert job["finished_at"] is not None
    for item in job["items"]:
        with svc.uow_factory() as uow:
            key = uow.views.item_audio(job_id, item["id"], admin.organization_id)
        assert key is not None and "-a1." in key  # the path carries the attempt
        assert read_stored(svc.storage, key) == fake_audio(item["text"])
    assert all(n == 1 for n in provider.calls.values())
    assert not [k for k in _audio_files(svc) if "/.tmp" in k]


def test_item_failure_fails_the_job_and_retry_resumes_without_paying_twice(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    job_id = new_job(svc, admin, 5)
    provider.fail_texts["text 3"] = permanent("voice not allowed for this text")
    job = _run(svc, admin, job_id)
    assert job["status"] == "FAILED"
    assert statuses(job) == ["DONE", "DONE", "ERROR", "DONE", "DONE"]
    assert job["items"][2]["error_message"] == "voice not allowed for this text"
    assert job["runs"][-1]["outcome"] == "FAILED"
    del provider.fail_texts["text 3"]
    job = _run(svc, admin, job_id)
    assert job["status"] == "COMPLETED"
    assert job["attempt"] == 2
    assert dict(provider.calls) == {
        "text 1": 1, "text 2": 1, "text 3": 2, "text 4": 1, "text 5": 1,
    }  # fmt: skip


def test_transient_errors_are_retried_within_max_attempts(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    job_id = new_job(svc, admin, 2)
    provider.fail_texts["text 2"] = retryable()
    job = _run(svc, admin, job_id)
    assert statuses(job) == ["DONE", "ERROR"]
    assert provider.calls["text 2"] == svc.settings.tts_max_attempts
    assert "gave up after 2 attempts" in job["items"][1]["error_message"]


def test_regenerate_sends_every_item_again_and_replaces_audio(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    job_id = new_job(svc, admin, 3)
    _run(svc, admin, job_id)
    job = _run(svc, admin, job_id, regenerate=True)
    assert job["status"] == "COMPLETED"
    assert all(n == 2 for n in provider.calls.values())
    names = [k.rsplit("/", 1)[-1] for k in _audio_files(svc)]
    # The new audio is current; the old audio stays, as each item's first take.
    assert len(names) == 6
    assert sum("-a2." in n for n in names) == 3 and sum("-a1." in n for n in names) == 3


def test_fenced_run_cannot_write_after_recovery_and_reclaim(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    """A run declared dead, whose job was claimed again, learns it lost and stops."""
    job_id = new_job(svc, admin, 8)
    provider.gate = threading.Event()
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: provider.in_flight == svc.settings.item_concurrency)
    with svc.uow_factory() as uow:  # declare run 1 dead
        assert uow.recovery.recover_stale_job(
            StaleJob(job_id, 1, "lease", None), lease_seconds=0,
            worker_dead_seconds=0, message="auto-recovered: test",
        )  # fmt: skip
        uow.commit()
    with svc.uow_factory() as uow:  # a new run (played by the test) claims it
        assert uow.jobs.claim_job(
            job_id, admin.organization_id, regenerate=False, user_id=None, worker_id=None
        ) == 2  # fmt: skip
        uow.commit()
    before = view(svc, admin, job_id)
    provider.gate.set()  # the zombie's calls return
    wait_for(lambda: not svc.runner.live_runs())
    after = view(svc, admin, job_id)
    assert after == before
    in_flight = svc.settings.item_concurrency
    assert statuses(after) == ["ERROR"] * in_flight + ["PENDING"] * (8 - in_flight)
    assert after["runs"][0]["outcome"] == "RECOVERED"
    assert after["runs"][1]["outcome"] == "RUNNING"
    # It made only the calls already in flight, and left no audio behind.
    assert provider.total_calls() == svc.settings.item_concurrency
    assert _audio_files(svc) == []


def test_graceful_stop_interrupts_and_a_retry_resumes(
    settings: Settings,
    admin: UserRecord,
    tmp_path: Path,
) -> None:
    slow = FakeProvider(latency=0.15)
    first: Flask = create_app(settings, provider=slow)
    svc = services(first)
    job_id = new_job(svc, admin, 12)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: view(svc, admin, job_id)["progress"]["done"] >= 2)
    svc.runner.drain(timeout=5)  # SIGTERM: no new item, in-flight ones finish
    job = get_job(svc.uow_factory, svc.settings, admin, job_id)
    assert job["status"] == "FAILED"
    assert job["runs"][-1]["outcome"] == "INTERRUPTED"
    assert "interrupted" in job["error_message"]
    done_before = {i["text"] for i in job["items"] if i["status"] == "DONE"}
    assert 2 <= len(done_before) < 12
    assert job["progress"]["generating"] == 0
    calls_before = slow.total_calls()
    assert calls_before == len(done_before)  # in-flight calls finished, none started after
    close_services(svc)

    second = create_app(settings, provider=slow)  # the restarted server
    svc2 = services(second)
    job = _run(svc2, admin, job_id)
    assert job["status"] == "COMPLETED"
    assert all(slow.calls[t] == 1 for t in done_before)
    assert slow.total_calls() == 12
    close_services(svc2)


def test_each_run_records_its_worker(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 1)
    job = _run(svc, admin, job_id)
    import os
    import socket

    assert job["runs"][0]["worker"] == f"{socket.gethostname()}:{os.getpid()}"


class _Stall:
    """Holds the first call of a run at one point until released: a frozen process."""

    def __init__(self) -> None:
        self.paused, self.release = threading.Event(), threading.Event()

    def here(self) -> None:
        if not self.paused.is_set():
            self.paused.set()
            self.release.wait(30)


def _zombie_pays_nothing(
    svc: Services, admin: UserRecord, stall: _Stall, calls: Callable[[], int]
) -> None:
    """Run a one-item job whose run stalls at ``stall``; meanwhile declare that run dead
    and let run 2 claim and finish the item; then wake the stalled run and check that it
    sent nothing (``calls``: the provider's calls for the item) and wrote nothing but the
    refund of the call it never sent."""
    # A real takeover needs the frozen process's heartbeat to be WORKER_DEAD_SECONDS old,
    # so the freeze lasts at least about 3/4 of it (the heartbeat beats every quarter).
    shortest_freeze = svc.settings.worker_dead_seconds * 0.75
    job_id = new_job(svc, admin, 1)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    assert stall.paused.wait(10)
    stalled_at = time.monotonic()
    with svc.uow_factory() as uow:  # run 1 is declared dead...
        assert uow.recovery.recover_stale_job(
            StaleJob(job_id, 1, "lease", None), lease_seconds=0,
            worker_dead_seconds=0, message="auto-recovered: test",
        )  # fmt: skip
        uow.commit()
    finished = _run(svc, admin, job_id)  # ...and run 2 claims and finishes the item
    assert finished["status"] == "COMPLETED" and finished["attempt"] == 2
    assert calls() == 1
    # The test's own takeover (no heartbeat to wait for) may have been quicker.
    time.sleep(max(0.0, stalled_at + shortest_freeze - time.monotonic()))
    stall.release.set()
    wait_for(lambda: not svc.runner.live_runs())
    assert calls() == 1  # the zombie sent nothing
    after = view(svc, admin, job_id)
    for job in (after, finished):
        job.pop("lease", None)  # the live process's heartbeat moves on
    # Its only write: it gave back the characters reserved for the call it never sent,
    # so the ledger stays what the provider received.
    assert finished["runs"][0]["billed_characters"] == len("text 1")
    assert after["runs"][0]["billed_characters"] == 0
    for job in (after, finished):
        del job["runs"][0]["billed_characters"], job["runs"][0]["provider_calls"]
    assert after == finished  # the zombie wrote nothing else


def test_run_stalled_before_its_call_past_a_takeover_sends_nothing(
    settings: Settings, admin: UserRecord, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that passed its fenced start and then stalled (a frozen process) while its job
    was recovered, claimed again and finished, wakes up and pays for no call."""
    app = create_app(with_settings(settings, worker_dead_seconds=2.0), provider=provider)
    svc = services(app)
    stall = _Stall()
    real_pace = item_module.pace

    def stall_first_item(steps: Steps, attempt: Attempt) -> Attempt:
        # Between the begin's fence and the send's fresh-fence check: the zombie's window.
        stall.here()
        return real_pace(steps, attempt)

    monkeypatch.setattr(item_module, "pace", stall_first_item)
    try:
        _zombie_pays_nothing(svc, admin, stall, lambda: provider.calls["text 1"])
    finally:
        stall.release.set()
        close_services(svc)


def test_run_stalled_after_its_fence_check_sends_no_http_request(
    settings: Settings, admin: UserRecord
) -> None:
    """The zombie's last window: a run passed the fresh-fence check before its call and
    then stalled (a frozen process) before requests prepared the HTTP request; its job
    was recovered, claimed again and finished meanwhile. The transport checks the fence
    again when requests hands it the request: nothing reaches the provider."""
    server = HttpFakeProvider().start()
    stall = _Stall()

    class StallsAfterTheCheck(OpenAIProvider):
        def synthesize(
            self, text: str, voice: str, options: Mapping[str, Any] | None = None
        ) -> bytes:
            # After before_attempt's fresh-fence check, before requests prepares.
            stall.here()
            return super().synthesize(text, voice, options)

    provider = StallsAfterTheCheck(server.url, None, "tts-1", ("alloy", "echo"), 5.0)
    app = create_app(with_settings(settings, worker_dead_seconds=2.0), provider=provider)
    svc = services(app)
    try:
        _zombie_pays_nothing(svc, admin, stall, lambda: server.calls("text 1"))
    finally:
        stall.release.set()
        close_services(svc)
        server.stop()


def test_an_item_no_longer_startable_is_skipped_and_the_run_goes_on(
    make_svc: Any, admin: UserRecord, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When an item's start finds it taken (its move matches nothing while the fence
    holds), the item is skipped and the run goes on to the next one. The second start is
    made to ask for an item id that no row has: the real statements run, and the start's
    move matches nothing."""
    svc = make_svc(item_concurrency=1)
    taken: list[int] = []
    start_item = RunsRepository.start_item

    def start(self: RunsRepository, job_id: int, attempt: int, item_id: int, **kw: Any) -> Any:
        if item_id == second:
            taken.append(item_id)
            item_id = -1
        return start_item(self, job_id, attempt, item_id, **kw)

    monkeypatch.setattr(RunsRepository, "start_item", start)
    job_id = new_job(svc, admin, 3)
    second = view(svc, admin, job_id)["items"][1]["id"]
    job = _run(svc, admin, job_id)
    assert taken == [second]
    assert statuses(job) == ["DONE", "PENDING", "DONE"]
    assert job["status"] == "FAILED" and job["runs"][-1]["outcome"] == "FAILED"
    assert provider.calls == {"text 1": 1, "text 3": 1}
    assert len(_audio_files(svc)) == 2


def test_a_finish_that_loses_deletes_its_audio_and_stops_the_run(
    make_svc: Any, admin: UserRecord, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should an item's DONE finish lose while the fence holds (here: it names an item id
    no row has), the run stops as when fenced: its audio is deleted, it writes nothing
    more, no other item is sent, and the job is left to recovery."""
    svc = make_svc(item_concurrency=1)
    finish_item = RunsRepository.finish_item

    def stray_finish(self: RunsRepository, job_id: int, attempt: int, item_id: int,
                     **kw: Any) -> Any:  # fmt: skip
        return finish_item(self, job_id, attempt, -1, **kw)

    monkeypatch.setattr(RunsRepository, "finish_item", stray_finish)
    job_id = new_job(svc, admin, 3)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: not svc.runner.live_runs())
    job = view(svc, admin, job_id)
    assert statuses(job) == ["GENERATING", "PENDING", "PENDING"]
    assert provider.calls == {"text 1": 1}
    assert _audio_files(svc) == []
    progress = job["progress"]
    assert (progress["generating"], progress["pending"], progress["done"]) == (1, 2, 0), progress
    with svc.uow_factory(read_only=True) as uow:
        assert uow.slots.slots_in_flight(worker_dead_seconds=30, max_hold_seconds=300) == 0


@pytest.mark.parametrize("failing", [1, 3])
def test_audio_that_cannot_be_stored_fails_its_item_and_the_run_goes_on(
    make_svc: Any,
    admin: UserRecord,
    provider: FakeProvider,
    monkeypatch: pytest.MonkeyPatch,
    failing: int,
) -> None:
    """A paid answer whose audio cannot be written fails its item ("could not store
    audio"), gives its call's slot back and leaves no file; the run goes on to the next
    item (the first item failing) and ends FAILED (the last one failing)."""
    svc = make_svc(item_concurrency=1)
    write = svc.runner.storage.write
    written: list[str] = []

    def write_or_fail(key: str, data: bytes) -> None:
        if data == fake_audio(f"text {failing}"):
            raise OSError(28, "No space left on device")
        write(key, data)
        written.append(key)

    monkeypatch.setattr(svc.runner.storage, "write", write_or_fail)
    job_id = new_job(svc, admin, 3)
    job = _run(svc, admin, job_id)
    expected = ["DONE"] * 3
    expected[failing - 1] = "ERROR"
    assert statuses(job) == expected
    failed = job["items"][failing - 1]
    assert failed["error_message"] == "could not store audio: No space left on device"
    assert failed["audio_url"] is None
    assert job["status"] == "FAILED" and job["runs"][-1]["outcome"] == "FAILED"
    assert provider.total_calls() == 3  # every item was sent once, the failed one too
    assert len(_audio_files(svc)) == len(written) == 2
    progress = job["progress"]
    assert (progress["done"], progress["error"], progress["generating"]) == (2, 1, 0)
    with svc.uow_factory(read_only=True) as uow:
        assert uow.slots.slots_in_flight(worker_dead_seconds=30, max_hold_seconds=300) == 0


def test_a_run_that_fails_after_a_takeover_ends_fenced_and_says_so(
    svc: Services, admin: UserRecord, provider: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """A zombie whose lanes fail (not on a fence) on waking cannot write its FAILED end
    either; its log says it was fenced, as an operator looking for the zombie expects."""
    job_id = new_job(svc, admin, 4)
    provider.gate = threading.Event()
    provider.fail_texts = {
        f"text {n}": RuntimeError("woke to a broken world") for n in (1, 2, 3, 4)
    }
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: provider.in_flight == svc.settings.item_concurrency)
    with svc.uow_factory() as uow:  # declared dead, and claimed again
        assert uow.recovery.recover_stale_job(
            StaleJob(job_id, 1, "lease", None), lease_seconds=0,
            worker_dead_seconds=0, message="auto-recovered: test",
        )  # fmt: skip
        assert uow.jobs.claim_job(
            job_id, admin.organization_id, regenerate=False, user_id=None, worker_id=None
        ) == 2  # fmt: skip
        uow.commit()
    before = view(svc, admin, job_id)
    caplog.set_level("INFO", logger="speechbatch.runner")
    provider.gate.set()
    wait_for(lambda: not svc.runner.live_runs())
    assert view(svc, admin, job_id) == before
    assert f"run fenced: declared dead or superseded, stopped job={job_id} attempt=1" in (
        caplog.messages
    )
