"""Resume after a deploy: interrupted runs are claimed again by the system, bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import update

from speechbatch.adapters.db import db_now
from speechbatch.adapters.models import Item, ItemStatus, Run
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.resume import RESUME
from speechbatch.app import Services
from speechbatch.runner.loops import MAX_RESUMES_WITHOUT_PROGRESS, resume_interrupted
from speechbatch.services import get_job, start_generation
from speechbatch.services.spending import cancel_generation
from tests.fakes import FakeProvider
from tests.helpers import claim, concrete, new_job, set_items, view, wait_for
from tests.integration.test_pages import sign_in


def _interrupted(svc: Services, user: UserRecord, job_id: int, *, kind: str | None = None) -> int:
    """Claim the job (as a person, or as a resume) and end that run INTERRUPTED."""
    with svc.uow_factory() as uow:
        attempt = uow.jobs.claim_job(
            job_id, user.organization_id, regenerate=False, user_id=None if kind else user.id,
            worker_id=None, kind=kind,
        )  # fmt: skip
        assert attempt is not None
        assert uow.runs.interrupt_run(job_id, attempt, "interrupted: the server stopped")
        uow.commit()
    return attempt


def _resumable(svc: Services) -> list[int]:
    with svc.uow_factory(read_only=True) as uow:
        found = uow.resume.find_resumable_jobs(max_streak=MAX_RESUMES_WITHOUT_PROGRESS, limit=100)
    return [job.job_id for job in found]


def _finished(svc: Services, user: UserRecord, job_id: int) -> dict[str, Any]:
    return wait_for(
        lambda: (j := view(svc, user, job_id))["status"] != "GENERATING" and j, timeout=20
    )


def test_an_interrupted_run_is_resumed_without_a_click(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    job_id = new_job(svc, admin, 3)
    _interrupted(svc, admin, job_id)
    assert resume_interrupted(svc.uow_factory, svc.runner) == 1
    job = _finished(svc, admin, job_id)
    assert job["status"] == "COMPLETED"
    last = job["runs"][-1]
    assert (last["kind"], last["started_by"], last["outcome"]) == (RESUME, None, "COMPLETED")
    assert provider.total_calls() == 3


def test_done_items_are_not_sent_again_by_a_resume(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    job_id = new_job(svc, admin, 3)
    first = view(svc, admin, job_id)["items"][0]["id"]
    _interrupted(svc, admin, job_id)
    set_items(svc, job_id, Item.id == first, status=ItemStatus.DONE, audio_path="x.mp3")
    assert resume_interrupted(svc.uow_factory, svc.runner) == 1
    assert _finished(svc, admin, job_id)["status"] == "COMPLETED"
    assert provider.calls["text 1"] == 0 and provider.total_calls() == 2


def test_a_cancelled_run_is_never_resumed(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 1)
    assert claim(svc, admin, job_id) is not None
    cancel_generation(svc.uow_factory, svc.runner, admin, job_id)
    assert _resumable(svc) == []
    assert resume_interrupted(svc.uow_factory, svc.runner) == 0
    assert view(svc, admin, job_id)["status"] == "FAILED"


@pytest.mark.parametrize("outcome", ["RECOVERED", "OVER_BUDGET", "FAILED", "CANCELLED"])
def test_only_interrupted_runs_are_resumed(svc: Services, admin: UserRecord, outcome: str) -> None:
    job_id = new_job(svc, admin, 1)
    attempt = _interrupted(svc, admin, job_id)
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(
            update(Run).where(Run.job_id == job_id, Run.attempt == attempt).values(outcome=outcome)
        )
        uow.commit()
    assert _resumable(svc) == []


def test_resumes_stop_after_three_in_a_row_without_a_done_item(
    svc: Services, admin: UserRecord
) -> None:
    job_id = new_job(svc, admin, 2)
    _interrupted(svc, admin, job_id)
    for _ in range(MAX_RESUMES_WITHOUT_PROGRESS):
        assert _resumable(svc) == [job_id]
        _interrupted(svc, admin, job_id, kind=RESUME)
    assert _resumable(svc) == []


def test_a_new_done_item_lets_resumes_go_on(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 2)
    _interrupted(svc, admin, job_id)
    for _ in range(MAX_RESUMES_WITHOUT_PROGRESS):
        _interrupted(svc, admin, job_id, kind=RESUME)
    first = view(svc, admin, job_id)["items"][0]["id"]
    set_items(
        svc, job_id, Item.id == first, status=ItemStatus.DONE, audio_path="x.mp3",
        updated_at=db_now(),
    )  # fmt: skip
    assert _resumable(svc) == [job_id]


def test_a_click_between_the_read_and_the_claim_wins(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 1)
    _interrupted(svc, admin, job_id)
    with svc.uow_factory(read_only=True) as uow:
        (found,) = uow.resume.find_resumable_jobs(max_streak=3, limit=10)
    assert claim(svc, admin, job_id) is not None  # a person clicks Retry first
    with svc.uow_factory() as uow:
        resumed = uow.jobs.claim_job(
            job_id, admin.organization_id, regenerate=False, user_id=None, worker_id=None,
            kind=RESUME, expected_attempt=found.attempt,
        )  # fmt: skip
    assert resumed is None


def test_a_draining_process_resumes_nothing(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 1)
    _interrupted(svc, admin, job_id)
    svc.runner.stop_starting_items()
    assert resume_interrupted(svc.uow_factory, svc.runner) == 0
    assert view(svc, admin, job_id)["status"] == "FAILED"


def test_the_background_tick_resumes_within_worker_dead_seconds(
    make_svc: Callable[..., Services], admin: UserRecord
) -> None:
    svc = make_svc(worker_dead_seconds=1.0)
    # As gunicorn's post_worker_init starts it.
    svc.runner.start_background(svc.runner.background_tick)
    job_id = new_job(svc, admin, 2)
    _interrupted(svc, admin, job_id)
    job = wait_for(
        lambda: (j := view(svc, admin, job_id))["status"] == "COMPLETED" and j, timeout=1.0 + 5
    )
    assert job["runs"][-1]["kind"] == RESUME


def test_the_job_page_says_it_was_resumed_automatically(
    svc: Services, admin: UserRecord, client: FlaskClient
) -> None:
    job_id = new_job(svc, admin, 1)
    _interrupted(svc, admin, job_id)
    resume_interrupted(svc.uow_factory, svc.runner)
    _finished(svc, admin, job_id)
    sign_in(client)
    page = client.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "resumed automatically after a restart" in page


def test_a_resume_tick_slower_than_worker_dead_seconds_never_makes_a_live_run_look_dead(
    make_svc: Callable[..., Services], admin: UserRecord, provider: FakeProvider
) -> None:
    """The resume tick runs on a thread of its own: while one tick blocks for three times
    WORKER_DEAD_SECONDS, the heartbeat goes on, so a live run of this process is never
    recovered (its paid call would be lost) and completes."""
    svc = make_svc(worker_dead_seconds=1.0)
    blocking, blocked = threading.Event(), threading.Event()

    def slow_tick() -> None:
        blocked.set()
        blocking.wait(3.0)

    provider.gate = threading.Event()  # the run's call waits: the run is live meanwhile
    job_id = new_job(svc, admin, 1)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: provider.in_flight == 1)
    svc.runner.start_background(slow_tick)
    assert blocked.wait(5)
    try:
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            # This read runs recovery first: a run whose worker looks dead would fail here.
            job = get_job(svc.uow_factory, svc.settings, admin, job_id)
            assert job["status"] == "GENERATING", job["error_message"]
            time.sleep(0.1)
    finally:
        blocking.set()
        provider.gate.set()
    assert _finished(svc, admin, job_id)["status"] == "COMPLETED"
