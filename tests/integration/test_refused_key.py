"""A refused key (401/403) fails its item and ends the run: every other item would fail
the same way, so none is sent."""

from __future__ import annotations

from collections.abc import Callable

from speechbatch.adapters.providers.base import RefusedKeyError
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import start_generation
from tests.fakes import FakeProvider
from tests.helpers import new_admin, new_job, statuses, view, wait_for


def test_a_refused_key_fails_the_item_and_ends_the_run(
    make_svc: Callable[..., Services], provider: FakeProvider
) -> None:
    svc = make_svc(item_concurrency=1)  # one lane: the calls come in the items' order
    admin: UserRecord = new_admin(svc, "acme", "admin@acme.test")
    job_id = new_job(svc, admin, 4)
    provider.fail_texts["text 2"] = RefusedKeyError("provider answered 401: invalid key", 401)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    job = wait_for(lambda: (j := view(svc, admin, job_id))["status"] != "GENERATING" and j)
    assert job["status"] == "FAILED"
    assert statuses(job) == ["DONE", "ERROR", "PENDING", "PENDING"]
    assert job["items"][1]["error_message"] == "provider answered 401: invalid key"
    assert job["runs"][-1]["outcome"] == "FAILED"
    assert "invalid key" in job["runs"][-1]["error_message"]
    # One call for the refused item: a refused key is never retried.
    assert dict(provider.calls) == {"text 1": 1, "text 2": 1}
