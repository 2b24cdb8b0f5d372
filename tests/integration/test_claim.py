"""The claim: one conditional UPDATE lets exactly one run through."""

from __future__ import annotations

import threading

import pytest

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.errors import AlreadyGenerating, NotFound, NothingToGenerate
from speechbatch.services import start_generation
from tests.helpers import claim, new_admin, new_job, set_items, view

THREADS = 32


def test_concurrent_claims_have_exactly_one_winner(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 5)
    barrier = threading.Barrier(THREADS)
    results: list[int | None] = []
    lock = threading.Lock()

    def click() -> None:
        barrier.wait(10)
        attempt = claim(svc, admin, job_id)
        with lock:
            results.append(attempt)

    threads = [threading.Thread(target=click) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == THREADS
    assert [r for r in results if r is not None] == [1]
    job = view(svc, admin, job_id)
    assert job["attempt"] == 1
    assert len(job["runs"]) == 1


def test_claim_increments_attempt_and_opens_a_run(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin)
    assert view(svc, admin, job_id)["attempt"] == 0
    assert claim(svc, admin, job_id) == 1
    job = view(svc, admin, job_id)
    assert job["status"] == "GENERATING"
    assert job["started_at"] is not None
    assert [(r["attempt"], r["outcome"], r["started_by"]) for r in job["runs"]] == [
        (1, "RUNNING", admin.email)
    ]


def test_generating_job_refuses_a_second_claim(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin)
    claim(svc, admin, job_id)
    with pytest.raises(AlreadyGenerating):
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    with pytest.raises(AlreadyGenerating):
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id, regenerate=True)


def test_job_with_every_item_done_has_nothing_to_generate(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin)
    set_items(svc, job_id, status="DONE")
    with pytest.raises(NothingToGenerate):
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    assert view(svc, admin, job_id)["attempt"] == 0


def test_claim_of_another_organizations_job_is_not_found(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin)
    eve = new_admin(svc, "other", "eve@other.test", "password-2")
    with pytest.raises(NotFound):
        start_generation(svc.uow_factory, svc.settings, svc.runner, eve, job_id)
    assert view(svc, admin, job_id)["status"] == "PENDING"


def test_regenerate_resets_every_item_but_keeps_old_audio(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin)
    set_items(svc, job_id, status="DONE", audio_path="jobs/old.mp3")
    from tests.helpers import set_job

    set_job(svc, job_id, status="COMPLETED")
    assert claim(svc, admin, job_id, regenerate=True) == 1
    job = view(svc, admin, job_id)
    assert [i["status"] for i in job["items"]] == ["PENDING"] * 3
    assert all(i["audio_url"] for i in job["items"])  # still downloadable until replaced
    assert job["runs"][-1]["kind"] == "regenerate"
