"""Spending under the admin's control: cancel, the ledger and budget, estimates, reuse, gc."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select

from speechbatch import create_app
from speechbatch.adapters.models import Item, Take
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.ledger import Reservation, SpendingRepository
from speechbatch.adapters.storage import LocalStorage
from speechbatch.app import Services
from speechbatch.errors import BudgetExceeded
from speechbatch.runner import audio_key as runner_audio_key
from speechbatch.services import create_job, spending, start_generation
from speechbatch.services.spending import cancel_generation
from tests.conftest import GC_STORAGES, STORAGES, close_services, services
from tests.fakes import FakeProvider, fake_audio, retryable
from tests.helpers import LIMITS, concrete, new_admin, new_job, statuses, view, wait_for
from tests.integration.test_pages import sign_in, text_of
from tests.support.storages import read_stored, stored_keys


class GatedProvider(FakeProvider):
    """A fake provider whose calls for some texts wait until released."""

    def __init__(self, held: set[str]) -> None:
        super().__init__()
        self.held = held
        self.release = threading.Event()

    def synthesize(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> bytes:
        if text in self.held:
            with self._lock:
                self.calls[text] += 1
                self.in_flight += 1
            try:
                self.release.wait(30)
            finally:
                with self._lock:
                    self.in_flight -= 1
            return b"ID3HELD" + text.encode()
        return super().synthesize(text, voice, options)


def received_characters(provider: FakeProvider) -> int:
    """Characters the provider was sent, every call counted."""
    return sum(len(text) * n for text, n in provider.calls.items())


def finished(svc: Services, user: UserRecord, job_id: int) -> dict[str, Any]:
    """Wait until the job's run is over and this process runs nothing; the job then."""
    wait_for(lambda: view(svc, user, job_id)["status"] != "GENERATING", timeout=20)
    wait_for(lambda: not svc.runner.live_runs(), timeout=20)
    return view(svc, user, job_id)


def run(
    svc: Services, user: UserRecord, job_id: int, *, regenerate: bool = False
) -> dict[str, Any]:
    start_generation(svc.uow_factory, svc.settings, svc.runner, user, job_id, regenerate=regenerate)
    return finished(svc, user, job_id)


def download(client: FlaskClient, url: str, auth: dict[str, str]) -> bytes | None:
    """An audio file's bytes, or None when it does not answer 200."""
    with client.get(url, headers=auth) as response:
        return response.data if response.status_code == 200 else None


def usage(svc: Services, user: UserRecord) -> dict[str, Any]:
    return spending.usage_view(svc.uow_factory, svc.settings, user)


def audio_key(svc: Services, user: UserRecord, job_id: int, item_id: int) -> str | None:
    with svc.uow_factory(read_only=True) as uow:
        return uow.views.item_audio(job_id, item_id, user.organization_id)


def job_of(svc: Services, user: UserRecord, texts: list[str], voice: str = "alloy") -> int:
    return create_job(svc.uow_factory, user, "job", voice, texts, LIMITS)


def other_admin(svc: Services) -> UserRecord:
    return new_admin(svc, "globex", "boss@globex.test")


# --- cancel ----------------------------------------------------------------------------


def test_cancel_mid_run_stops_it_and_retry_resumes_without_paying_twice(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str]
) -> None:
    provider = GatedProvider({"text 5", "text 6"})
    svc.runner.provider = provider
    job_id = new_job(svc, admin, 6)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: provider.in_flight == 2 and view(svc, admin, job_id)["progress"]["done"] == 4)

    response = client.post(f"/api/jobs/{job_id}/cancel", headers=auth)
    calls_at_answer = provider.total_calls()
    assert response.status_code == 200
    job = response.get_json()
    assert job["status"] == "FAILED"
    assert job["runs"][-1]["outcome"] == "CANCELLED"
    assert job["runs"][-1]["cancelled_by"] == admin.email
    assert statuses(job) == ["DONE"] * 4 + ["PENDING"] * 2
    after_answer = view(svc, admin, job_id)

    provider.release.set()  # the calls in flight answer now: their answers are discarded
    job = finished(svc, admin, job_id)
    assert provider.total_calls() == calls_at_answer  # no call started after the answer
    assert job == after_answer  # and nothing changed
    left = [k for k in stored_keys(svc.storage) if k.endswith("-a1.mp3")]
    assert not [k for k in left if "/5-" in k or "/6-" in k]

    provider.held = set()
    job = run(svc, admin, job_id)  # Retry resumes
    assert job["status"] == "COMPLETED"
    assert dict(provider.calls) == {
        "text 1": 1, "text 2": 1, "text 3": 1, "text 4": 1, "text 5": 2, "text 6": 2,
    }  # fmt: skip
    # The ledger counts what the provider received, the discarded calls included.
    assert usage(svc, admin)["billed_characters"] == received_characters(provider)


@pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
def test_cancel_from_another_process_discards_the_answers_in_flight_and_their_files(
    svc: Services, admin: UserRecord
) -> None:
    """The cancel lands in a process that does not run the job (another gunicorn worker):
    the runner learns it at its next fenced write, so the answers of the calls in flight
    are stored, refused by the fence, and their files deleted; nothing else changes."""
    provider = GatedProvider({"text 3", "text 4"})
    svc.runner.provider = provider
    other = services(create_app(svc.settings, provider=FakeProvider()))
    try:
        job_id = new_job(svc, admin, 4)
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
        wait_for(
            lambda: provider.in_flight == 2 and view(svc, admin, job_id)["progress"]["done"] == 2
        )
        in_flight = [i["id"] for i in view(svc, admin, job_id)["items"] if i["status"] != "DONE"]
        cancel_generation(other.uow_factory, other.runner, admin, job_id)
        after_answer = view(svc, admin, job_id)
        assert after_answer["runs"][-1]["outcome"] == "CANCELLED"
        assert statuses(after_answer) == ["DONE", "DONE", "PENDING", "PENDING"]

        provider.release.set()
        wait_for(lambda: not svc.runner.live_runs(), timeout=20)
        assert view(svc, admin, job_id) == after_answer
        keys = [runner_audio_key(job_id, item, 1, provider.file_extension) for item in in_flight]
        assert not [k for k in keys if svc.storage.exists(k)]
        assert not [k for k in stored_keys(svc.storage) if "/.tmp-" in k]
        assert provider.total_calls() == 4
        # The two discarded calls were paid for: the ledger says so.
        assert usage(svc, admin)["billed_characters"] == received_characters(provider)
    finally:
        close_services(other)


def test_cancel_without_a_live_run_is_refused(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str]
) -> None:
    job_id = new_job(svc, admin, 1)
    response = client.post(f"/api/jobs/{job_id}/cancel", headers=auth)
    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "not_generating"


@pytest.mark.parametrize("method, call", [("POST", "cancel"), ("GET", "estimate")])
def test_another_organizations_job_is_not_found(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str], method: str,
    call: str,
) -> None:  # fmt: skip
    job_id = new_job(svc, other_admin(svc), 1)
    response = client.open(f"/api/jobs/{job_id}/{call}", method=method, headers=auth)
    assert response.status_code == 404


# --- the ledger and the budget -----------------------------------------------------------


def test_ledger_counts_every_attempt_as_the_provider_received_it(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    provider.fail_texts["text 2"] = retryable()
    job = run(svc, admin, new_job(svc, admin, 3))
    assert statuses(job) == ["DONE", "ERROR", "DONE"]
    ledger = usage(svc, admin)
    assert ledger["billed_characters"] == received_characters(provider) == 6 * 4
    assert ledger["provider_calls"] == provider.total_calls() == 4
    assert job["runs"][-1]["billed_characters"] == 24
    assert job["runs"][-1]["provider_calls"] == 4


def test_run_that_runs_out_of_budget_ends_over_budget_and_retry_resumes(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    spending.set_budget(svc.uow_factory, "acme", 20)  # three 6-character items fit
    job_id = new_job(svc, admin, 6)
    job = run(svc, admin, job_id)
    assert job["status"] == "FAILED"
    assert job["runs"][-1]["outcome"] == "OVER_BUDGET"
    assert sorted(statuses(job)) == ["DONE"] * 3 + ["PENDING"] * 3
    assert "18 of 20 characters billed" in job["error_message"]
    assert "2 left" in job["error_message"]
    assert usage(svc, admin)["billed_characters"] == 18 == received_characters(provider)

    spending.set_budget(svc.uow_factory, "acme", 100)
    job = run(svc, admin, job_id)
    assert job["status"] == "COMPLETED"
    assert all(n == 1 for n in provider.calls.values()) and provider.total_calls() == 6
    assert usage(svc, admin)["billed_characters"] == 36


def test_a_refused_reservation_leaves_every_finished_item_done(
    make_svc: Callable[..., Services],
    admin: UserRecord,
    provider: FakeProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With one item at a time, the fourth item's reservation does not fit the budget:
    the three items before it were committed DONE by their own finishes (nothing of a
    finish waits for the next start), stay DONE with their audio, are billed once, and
    their slots are given back."""
    svc = make_svc(item_concurrency=1)
    spending.set_budget(svc.uow_factory, "acme", 20)  # three 6-character items fit
    # At the refusal, what other connections see of the items (committed state only).
    seen_at_refusal: list[list[str]] = []
    reserve = SpendingRepository.reserve_characters

    def watched_reserve(
        self: SpendingRepository,
        org: int,
        job: int,
        attempt: int,
        n: int,
        provider: str | None = None,
    ) -> Reservation | None:
        reservation = reserve(self, org, job, attempt, n, provider)
        if reservation is None:
            with concrete(svc.uow_factory)(read_only=True) as other:
                seen_at_refusal.append(
                    list(
                        other.session.execute(
                            select(Item.status).where(Item.job_id == job).order_by(Item.position)
                        ).scalars()
                    )
                )
        return reservation

    monkeypatch.setattr(SpendingRepository, "reserve_characters", watched_reserve)
    job_id = new_job(svc, admin, 6)
    job = run(svc, admin, job_id)
    assert seen_at_refusal == [["DONE"] * 3 + ["PENDING"] * 3]
    assert job["runs"][-1]["outcome"] == "OVER_BUDGET"
    assert statuses(job) == ["DONE"] * 3 + ["PENDING"] * 3
    assert usage(svc, admin)["billed_characters"] == 18 == received_characters(provider)
    assert provider.total_calls() == 3
    for item in job["items"][:3]:
        key = audio_key(svc, admin, job_id, item["id"])
        assert key is not None and svc.runner.storage.exists(key)
    with svc.uow_factory(read_only=True) as uow:
        assert uow.slots.slots_in_flight(worker_dead_seconds=30, max_hold_seconds=300) == 0


def test_claim_answers_budget_exceeded_when_no_item_fits(
    svc: Services, admin: UserRecord, provider: FakeProvider, client: FlaskClient,
    auth: dict[str, str],
) -> None:  # fmt: skip
    spending.set_budget(svc.uow_factory, "acme", 5)
    job_id = new_job(svc, admin, 2)
    response = client.post(f"/api/jobs/{job_id}/generate", headers=auth)
    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "budget_exceeded"
    assert view(svc, admin, job_id)["attempt"] == 0
    assert provider.total_calls() == 0


def test_the_claims_budget_hint_refuses_only_when_no_call_to_send_fits(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    # Paid for once, without a budget: the audio of "a long text number 1" exists.
    run(svc, admin, job_of(svc, admin, ["a long text number 1"]))
    spending.set_budget(svc.uow_factory, "acme", 40)  # 20 billed, 20 left
    # Longer than what is left but reusable, and a short one that fits: claimed.
    mixed = job_of(svc, admin, ["a long text number 1", "short", "a long text number 2!"])
    assert run(svc, admin, mixed)["status"] == "FAILED"  # the unreusable long one is over
    assert provider.calls["short"] == 1 and provider.calls["a long text number 2!"] == 0
    # Every text longer than what is left, but all of it reusable: claimed, nothing sent.
    reused = job_of(svc, admin, ["a long text number 1"] * 2)
    assert run(svc, admin, reused)["status"] == "COMPLETED"
    # Only unreusable texts longer than what is left: refused before any claim.
    with pytest.raises(BudgetExceeded):
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin,
                         job_of(svc, admin, ["another long text"]))  # fmt: skip
    assert provider.total_calls() == 2
    with svc.uow_factory(read_only=True) as uow:
        assert uow.spending.longest_unsent(reused, admin.organization_id, regenerate=False) == 0
        assert uow.spending.longest_unsent(reused, admin.organization_id, regenerate=True) == 20
        assert (
            uow.spending.longest_unsent(reused, admin.organization_id + 1, regenerate=True) is None
        )


def test_concurrent_runs_never_bill_above_the_budget(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    spending.set_budget(svc.uow_factory, "acme", 95)
    # 10-character items: 9 fit in 95, and all three claims pass while calls wait.
    jobs = [job_of(svc, admin, [f"j{j} item {i:02d}" for i in range(12)]) for j in range(3)]
    provider.gate = threading.Event()
    for job_id in jobs:
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    provider.gate.set()
    outcomes = [finished(svc, admin, job_id)["runs"][-1]["outcome"] for job_id in jobs]
    assert outcomes == ["OVER_BUDGET"] * 3
    ledger = usage(svc, admin)
    assert ledger["billed_characters"] == received_characters(provider) == 90
    assert ledger["remaining_characters"] == 5


def test_usage_answers_this_months_ledger(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str]
) -> None:
    run(svc, admin, new_job(svc, admin, 2))
    spending.set_budget(svc.uow_factory, "acme", 1000)
    body = client.get("/api/usage", headers=auth).get_json()
    assert body["month"] == time.strftime("%Y-%m", time.gmtime())
    assert body["billed_characters"] == 12 and body["provider_calls"] == 2
    assert body["budget_characters"] == 1000 and body["remaining_characters"] == 988
    assert body["in_doubt_calls"] == 0 and body["in_doubt_characters"] == 0


def test_set_budget_command(svc: Services, admin: UserRecord, client: FlaskClient) -> None:
    cli = client.application.test_cli_runner()
    result = cli.invoke(args=["set-budget", "--org", "acme", "--characters", "500"])
    assert result.exit_code == 0, result.output
    assert usage(svc, admin)["budget_characters"] == 500
    assert cli.invoke(args=["set-budget", "--org", "acme", "--none"]).exit_code == 0
    assert usage(svc, admin)["budget_characters"] is None
    assert cli.invoke(args=["set-budget", "--org", "acme"]).exit_code == 2
    assert cli.invoke(args=["set-budget", "--org", "nope", "--characters", "1"]).exit_code == 1


# --- reuse -----------------------------------------------------------------------------


def test_identical_audio_is_reused_across_jobs_of_an_organization(
    svc: Services, admin: UserRecord, provider: FakeProvider, client: FlaskClient,
    auth: dict[str, str],
) -> None:  # fmt: skip
    first = run(svc, admin, job_of(svc, admin, ["Welcome aboard", "Mind the gap"]))
    job_id = job_of(svc, admin, ["Mind the gap", "Next stop"])
    job = run(svc, admin, job_id)
    assert job["status"] == "COMPLETED"
    assert [i["reused"] for i in job["items"]] == [True, False]
    assert provider.calls["Mind the gap"] == 1
    shared = download(client, job["items"][0]["audio_url"], auth)
    assert shared is not None and shared == download(client, first["items"][1]["audio_url"], auth)
    assert usage(svc, admin)["billed_characters"] == len("Welcome aboardMind the gapNext stop")


def test_audio_is_never_reused_across_organizations(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    run(svc, admin, job_of(svc, admin, ["Hello there"]))
    other = other_admin(svc)
    job = run(svc, other, job_of(svc, other, ["Hello there"]))
    assert job["items"][0]["reused"] is False
    assert provider.calls["Hello there"] == 2


def test_audio_is_never_reused_for_another_voice(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    run(svc, admin, job_of(svc, admin, ["Hello there"], voice="alloy"))
    job = run(svc, admin, job_of(svc, admin, ["Hello there"], voice="echo"))
    assert job["items"][0]["reused"] is False
    assert provider.calls["Hello there"] == 2


def test_duplicates_within_a_job_are_sent_once(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    job = run(svc, admin, job_of(svc, admin, ["Yes", "No", "Yes", "Yes", "No"]))
    assert job["status"] == "COMPLETED"
    assert dict(provider.calls) == {"Yes": 1, "No": 1}
    assert [i["reused"] for i in job["items"]] == [False, False, True, True, True]
    assert job["runs"][-1]["provider_calls"] == 2


def test_regenerate_pays_again_and_later_jobs_reuse_its_new_audio(
    svc: Services, admin: UserRecord, provider: FakeProvider
) -> None:
    job_id = job_of(svc, admin, ["Good morning"])
    run(svc, admin, job_id)
    job = run(svc, admin, job_id, regenerate=True)
    assert job["items"][0]["reused"] is False
    assert provider.calls["Good morning"] == 2
    new_key = audio_key(svc, admin, job_id, job["items"][0]["id"])
    later = run(svc, admin, job_of(svc, admin, ["Good morning"]))
    assert later["items"][0]["reused"] is True
    assert audio_key(svc, admin, later["id"], later["items"][0]["id"]) == new_key
    assert provider.calls["Good morning"] == 2


@pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
def test_shared_audio_survives_a_regenerate_and_gc(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str]
) -> None:
    first = run(svc, admin, job_of(svc, admin, ["Station A"]))
    second = run(svc, admin, job_of(svc, admin, ["Station A"]))
    shared_key = audio_key(svc, admin, first["id"], first["items"][0]["id"])
    assert shared_key is not None
    assert audio_key(svc, admin, second["id"], second["items"][0]["id"]) == shared_key
    run(svc, admin, first["id"], regenerate=True)
    assert svc.storage.exists(shared_key)  # the second job still refers to it
    spending.collect_garbage(svc.uow_factory, svc.storage, min_age_seconds=0)
    assert svc.storage.exists(shared_key)
    assert download(client, second["items"][0]["audio_url"], auth) is not None


@pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
def test_audio_a_regenerate_replaces_is_deleted_when_its_take_falls_off(
    svc: Services, admin: UserRecord
) -> None:
    """The replaced audio stays a kept take until TAKES_KEPT newer takes push it off;
    then nothing refers to it and it is deleted at once."""
    job = run(svc, admin, job_of(svc, admin, ["Only here"]))
    old_key = audio_key(svc, admin, job["id"], job["items"][0]["id"])
    assert old_key is not None and svc.storage.exists(old_key)
    for _ in range(svc.settings.takes_kept - 1):
        run(svc, admin, job["id"], regenerate=True)
        assert svc.storage.exists(old_key)
    run(svc, admin, job["id"], regenerate=True)
    assert not svc.storage.exists(old_key)


@pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
def test_regenerates_of_a_job_with_duplicates_leave_no_unreferenced_file(
    svc: Services, admin: UserRecord
) -> None:
    """One line sent, its duplicate sharing the file; then regenerates: every file the
    pair replaced is deleted at once (sent and reused finishes alike), so the storage
    folder holds exactly the files that items refer to."""
    job_id = job_of(svc, admin, ["Echo line", "Echo line", "Solo line"])
    run(svc, admin, job_id)
    for _ in range(2):
        job = run(svc, admin, job_id, regenerate=True)
        assert statuses(job) == ["DONE"] * 3
    referenced = {audio_key(svc, admin, job_id, item["id"]) for item in job["items"]}
    with concrete(svc.uow_factory)(read_only=True) as uow:
        kept = set(uow.session.execute(select(Take.audio_path)).scalars())
    stored = set(stored_keys(svc.storage))
    assert len(referenced) == 2
    assert referenced <= kept
    assert stored == kept


# --- gc ----------------------------------------------------------------------------------


def test_gc_deletes_old_unreferenced_and_temporary_files_only(
    svc: Services, admin: UserRecord, client: FlaskClient
) -> None:
    job = run(svc, admin, job_of(svc, admin, ["Keep me"]))
    kept = audio_key(svc, admin, job["id"], job["items"][0]["id"])
    assert kept is not None
    folder = cast(LocalStorage, svc.storage)
    for key in ("jobs/999/1-a1.mp3", "jobs/999/.tmp-abc.mp3", "jobs/998/fresh.mp3"):
        path = folder.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    two_hours_ago = time.time() - 7200
    for key in (kept, "jobs/999/1-a1.mp3", "jobs/999/.tmp-abc.mp3"):
        os.utime(folder.path(key), (two_hours_ago, two_hours_ago))
    result = client.application.test_cli_runner().invoke(args=["gc"])
    assert result.exit_code == 0, result.output
    assert "deleted 2 file(s)" in result.output
    assert not svc.storage.exists("jobs/999/1-a1.mp3")
    assert not svc.storage.exists("jobs/999/.tmp-abc.mp3")
    assert svc.storage.exists(kept) and svc.storage.exists("jobs/998/fresh.mp3")


@pytest.mark.parametrize("storage_kind", GC_STORAGES, indirect=True)
def test_gc_sweeps_the_folder_or_the_bucket_with_its_age_guard(
    svc: Services, admin: UserRecord, storage_kind: str
) -> None:
    """On a bucket too: unreferenced objects and temporary ones older than the guard go,
    and so do unfinished multipart uploads (a process killed mid-upload); what is
    referenced or younger than the guard stays. Ages are real: the guard is 2 s here."""
    job = run(svc, admin, job_of(svc, admin, ["Keep me"]))
    kept = audio_key(svc, admin, job["id"], job["items"][0]["id"])
    assert kept is not None
    svc.storage.write("jobs/999/1-a1.mp3", b"x")
    svc.storage.write("jobs/999/.tmp-abc.mp3", b"x")
    expected = ["jobs/999/.tmp-abc.mp3", "jobs/999/1-a1.mp3"]
    if storage_kind != "folder":
        bucket = cast(Any, svc.storage)
        bucket.client.create_multipart_upload(
            Bucket=bucket.bucket, Key=bucket.prefix + "exports/1/export-9.zip"
        )
        expected.insert(0, "exports/1/export-9.zip (unfinished upload)")
    time.sleep(2.5)
    svc.storage.write("jobs/998/fresh.mp3", b"x")
    collected = spending.collect_garbage(svc.uow_factory, svc.storage, min_age_seconds=2)
    assert collected.deleted == expected
    assert collected.skipped == []
    assert stored_keys(svc.storage) == sorted([kept, "jobs/998/fresh.mp3"])
    assert svc.storage.abort_uploads_older_than(0) == []
    assert read_stored(svc.storage, kept) == fake_audio("Keep me")


# --- the estimate ------------------------------------------------------------------------


def test_estimate_counts_calls_characters_and_reuse(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str]
) -> None:
    run(svc, admin, job_of(svc, admin, ["hello world"]))
    job_id = job_of(svc, admin, ["hello world", "abc", "abc", "defg"])
    body = client.get(f"/api/jobs/{job_id}/estimate", headers=auth).get_json()
    assert body == {
        "items": 2,
        "characters": 7,
        "reused_items": 2,
        "too_long_items": 0,
        "pending_items": 0,
        "price": None,
    }
    body = client.get(f"/api/jobs/{job_id}/estimate?regenerate=1", headers=auth).get_json()
    assert body == {
        "items": 3,
        "characters": 18,
        "reused_items": 1,
        "too_long_items": 0,
        "pending_items": 0,
        "price": None,
    }


# --- pages -------------------------------------------------------------------------------


def test_job_page_shows_the_estimate_and_a_cancel_button(
    svc: Services, admin: UserRecord, client: FlaskClient
) -> None:
    sign_in(client)
    job_id = job_of(svc, admin, ["one", "two", "one"])
    page = text_of(client.get(f"/jobs/{job_id}"))
    assert "Generate: 2 items, 6 characters; 1 will reuse audio" in page
    assert 'id="btn-cancel"' in page and "data-confirm=" in page


def test_cancel_button_cancels_the_live_run(
    svc: Services, admin: UserRecord, client: FlaskClient
) -> None:
    token = sign_in(client)
    provider = GatedProvider({"text 1"})
    svc.runner.provider = provider
    job_id = new_job(svc, admin, 1)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: provider.in_flight == 1)
    response = client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": token})
    provider.release.set()
    assert response.status_code == 302
    job = finished(svc, admin, job_id)
    assert job["runs"][-1]["outcome"] == "CANCELLED"
    page = text_of(client.get(f"/jobs/{job_id}"))
    assert "was cancelled by admin@acme.test" in page


def test_cancel_form_without_csrf_changes_nothing(
    svc: Services, admin: UserRecord, client: FlaskClient
) -> None:
    sign_in(client)
    job_id = new_job(svc, admin, 1)
    assert client.post(f"/jobs/{job_id}/cancel").status_code == 400


def test_usage_page_shows_the_ledger_against_the_budget(
    svc: Services, admin: UserRecord, client: FlaskClient
) -> None:
    sign_in(client)
    run(svc, admin, new_job(svc, admin, 2))
    spending.set_budget(svc.uow_factory, "acme", 1000)
    page = text_of(client.get("/usage"))
    assert "12</strong> characters billed" in page and "988</strong> left" in page


def test_graceful_stop_between_duplicates_interrupts_the_run(
    svc: Services, admin: UserRecord
) -> None:
    provider = GatedProvider({"Same words"})
    svc.runner.provider = provider
    job_id = job_of(svc, admin, ["Same words", "Same words"])
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: provider.in_flight == 1)
    svc.runner.stop_starting_items()  # SIGTERM: the duplicate is not started
    provider.release.set()
    job = finished(svc, admin, job_id)
    assert statuses(job) == ["DONE", "PENDING"]
    assert job["runs"][-1]["outcome"] == "INTERRUPTED"
