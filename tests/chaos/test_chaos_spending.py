"""Spending under the same eyes, on the fault scenarios' shared server: a cancel while
calls are in flight, and a budget that runs out mid-run. No call starts after the
answer, the ledger equals what the provider received, and Retry completes without
paying twice.
"""

from __future__ import annotations

import random
import time

from tests.support.server import cli, wait_until

from .chaos_helpers import new_tag, unique_texts, with_log
from .conftest import Stack
from .harness import (
    SETTLE_TIMEOUT,
    ChaosReport,
    Checks,
    Row,
    billing_marks,
    check_completed_job,
    check_jobs_health,
    check_ledger,
    done_texts,
    job_summary,
    temp_files,
)


def test_cancel_mid_job_stops_it_and_retry_resumes(stack: Stack, chaos_report: ChaosReport) -> None:
    """Cancel while calls are in flight (through either worker): no call starts after the
    answer, the answers in flight are discarded, Retry completes, and the ledger equals
    what the provider received, the discarded calls included."""
    checks = Checks(f"seed={stack.seed} cancel")
    obs = stack.observer(checks.context)
    texts = unique_texts(random.Random(f"{stack.seed}-cancel"), new_tag("cancel"), 8)
    row = chaos_report.add(Row(run="cancel", fault="cancel mid-run", moment="calls in flight"))
    marks = billing_marks(stack.db, stack.fake)
    try:
        for text in texts:
            stack.fake.slow(text, 1.0)
        job_id = int(obs.create_job(texts, title="cancel")["id"])
        checks.check("generate 202", obs.generate(job_id).status_code == 202)
        wait_until(lambda: stack.fake.calls_for(texts) >= 2, 10, 0.02, what="calls in flight")
        response = obs.request("POST", f"/api/jobs/{job_id}/cancel")
        calls_at_answer = stack.fake.calls_for(texts)
        checks.check("cancel 200", response is not None and response.status_code == 200)
        assert response is not None
        cancelled = response.json()
        checks.check(
            "job FAILED, run CANCELLED",
            cancelled["status"] == "FAILED" and cancelled["runs"][-1]["outcome"] == "CANCELLED",
            job_summary(cancelled),
        )
        time.sleep(1.5)  # the calls in flight answer now; their answers must be discarded
        after = obs.settled(job_id, SETTLE_TIMEOUT, "cancelled run ended")
        checks.check(
            "no call started after the answer",
            stack.fake.calls_for(texts) == calls_at_answer,
            (calls_at_answer, stack.fake.calls_for(texts)),
        )
        checks.check(
            "nothing written after the answer",
            [i["status"] for i in after["items"]] == [i["status"] for i in cancelled["items"]]
            and after["progress"] == cancelled["progress"],
            (job_summary(cancelled), job_summary(after)),
        )
        check_jobs_health(checks, stack.db, [job_id])
        for text in texts:
            stack.fake.slow(text, None)
        done_before = done_texts(after)
        checks.check("retry 202", obs.generate(job_id).status_code == 202)
        final = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        check_completed_job(
            checks, obs, stack.db, stack.storage, final, texts, billed_once=done_before,
            max_calls=lambda t: 2,
        )  # fmt: skip
        check_ledger(checks, stack.db, stack.fake, marks)
        checks.check("no temporary file left", not temp_files(stack.storage))
        row.calls_before, row.calls_after = calls_at_answer, stack.fake.calls_for(texts)
        row.checks = checks.passed
        row.result = "ok"
        row.note = f"cancelled with {calls_at_answer} calls sent; retry completes"
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, stack.server) from exc


def test_budget_runs_out_then_retry_resumes(stack: Stack, chaos_report: ChaosReport) -> None:
    """A budget that pays for 3 of 6 items: the run ends OVER_BUDGET with 3 DONE and 3
    PENDING, the ledger never passes the budget and equals what the provider received;
    with the budget removed, Retry completes without paying twice."""
    checks = Checks(f"seed={stack.seed} budget")
    obs = stack.observer(checks.context)
    tag = new_tag("budget")
    texts = [f"{tag} budget item {k:02d}" for k in range(6)]  # all the same length
    row = chaos_report.add(Row(run="budget", fault="budget for 3 of 6", moment="4th call"))
    marks = billing_marks(stack.db, stack.fake)
    budget = marks[0] + 3 * len(texts[0]) + len(texts[0]) // 2
    try:
        cli(stack.env, "set-budget", "--org", "acme", "--characters", str(budget))
        job_id = int(obs.create_job(texts, title="budget")["id"])
        checks.check("generate 202", obs.generate(job_id).status_code == 202)
        first = obs.settled(job_id, SETTLE_TIMEOUT, "run over budget")
        checks.check(
            "job FAILED, run OVER_BUDGET, 3 DONE and 3 PENDING",
            first["status"] == "FAILED"
            and first["runs"][-1]["outcome"] == "OVER_BUDGET"
            and sorted(i["status"] for i in first["items"]) == ["DONE"] * 3 + ["PENDING"] * 3,
            job_summary(first),
        )
        checks.check("ledger within the budget", stack.db.ledger() <= budget, stack.db.ledger())
        check_ledger(checks, stack.db, stack.fake, marks)
        refused = obs.generate(job_id)
        checks.check(
            "a claim that cannot pay answers 409 budget_exceeded",
            refused.status_code == 409 and refused.json()["error"]["code"] == "budget_exceeded",
            refused.text[:300],
        )
        cli(stack.env, "set-budget", "--org", "acme", "--none")
        done_before = done_texts(first)
        checks.check("retry 202", obs.generate(job_id).status_code == 202)
        final = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        check_completed_job(
            checks, obs, stack.db, stack.storage, final, texts, billed_once=done_before
        )
        check_ledger(checks, stack.db, stack.fake, marks)
        row.checks = checks.passed
        row.result = "ok"
        row.note = "OVER_BUDGET with 3 DONE; retry after the budget is lifted completes"
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, stack.server) from exc
    finally:
        cli(stack.env, "set-budget", "--org", "acme", "--none")
