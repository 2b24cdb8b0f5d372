"""What operators see of spending: the metrics and log lines of reuse, billing, budget
refusals and cancels (issue 9, item 6), on both databases."""

from __future__ import annotations

import logging

import pytest
from flask.testing import FlaskClient
from prometheus_client import REGISTRY

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import spending, start_generation
from speechbatch.services.spending import cancel_generation
from tests.helpers import new_job, wait_for
from tests.integration.test_spending import GatedProvider, finished, job_of, run


def sample(name: str, **labels: str) -> float:
    """A counter's value in this process (0 before its first increment)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_billed_characters_count_every_sent_call_and_reuse_counts_items(
    svc: Services, admin: UserRecord, caplog: pytest.LogCaptureFixture
) -> None:
    texts = ["a greeting", "a station name"]
    billed = sample("speechbatch_billed_characters_total", status="200")
    reused = sample("speechbatch_reused_items_total")
    run(svc, admin, job_of(svc, admin, texts))
    assert sample("speechbatch_billed_characters_total", status="200") - billed == sum(
        map(len, texts)
    )
    with caplog.at_level(logging.INFO, logger="speechbatch.runner"):
        job = run(svc, admin, job_of(svc, admin, ["a greeting"]))
    assert job["items"][0]["reused"] is True
    assert sample("speechbatch_reused_items_total") - reused == 1
    assert any("audio reused" in r.getMessage() for r in caplog.records), caplog.text
    # Nothing more was billed for the reused item.
    assert sample("speechbatch_billed_characters_total", status="200") - billed == sum(
        map(len, texts)
    )


def test_a_budget_refusal_at_the_claim_is_counted_and_logged(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    spending.set_budget(svc.uow_factory, "acme", 3)
    job_id = new_job(svc, admin, 1)
    refusals = sample("speechbatch_budget_refusals_total", where="claim")
    with caplog.at_level(logging.WARNING, logger="speechbatch.services.spending"):
        response = client.post(f"/api/jobs/{job_id}/generate", headers=auth)
    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "budget_exceeded"
    assert sample("speechbatch_budget_refusals_total", where="claim") - refusals == 1
    assert any("claim refused by the budget" in r.getMessage() for r in caplog.records)


def test_a_budget_refusal_during_a_run_is_counted_and_logged(
    svc: Services, admin: UserRecord, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = job_of(svc, admin, ["twelve chars", "twelve chars", "other twelve"])
    spending.set_budget(svc.uow_factory, "acme", 12)  # one call's worth
    refusals = sample("speechbatch_budget_refusals_total", where="run")
    with caplog.at_level(logging.WARNING, logger="speechbatch.runner"):
        job = run(svc, admin, job_id)
    assert job["runs"][-1]["outcome"] == "OVER_BUDGET"
    assert sample("speechbatch_budget_refusals_total", where="run") - refusals == 1
    assert any("budget refused a call" in r.getMessage() for r in caplog.records), caplog.text


def test_a_cancel_is_counted_and_logged_with_who_cancelled(
    svc: Services, admin: UserRecord, caplog: pytest.LogCaptureFixture
) -> None:
    provider = GatedProvider({"text 1"})
    svc.runner.provider = provider
    job_id = new_job(svc, admin, 1)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: provider.in_flight == 1)
    cancels = sample("speechbatch_cancels_total")
    with caplog.at_level(logging.WARNING, logger="speechbatch.services.spending"):
        cancel_generation(svc.uow_factory, svc.runner, admin, job_id)
    provider.release.set()
    finished(svc, admin, job_id)
    assert sample("speechbatch_cancels_total") - cancels == 1
    lines = [r.getMessage() for r in caplog.records if "run cancelled" in r.getMessage()]
    assert lines and f"by={admin.email}" in lines[0], caplog.text
