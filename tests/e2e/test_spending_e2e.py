"""Spending across processes: a budget that any number of runs in two gunicorn servers
share is never overshot, and the ledger equals what the provider received."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.fake_provider import FakeProvider
from tests.support.server import ApiClient, GunicornServer, cli

BUDGET = 300
ITEMS_PER_JOB = 12


def test_budget_holds_for_three_jobs_in_two_servers(
    env: dict[str, str],
    spawn_server: Callable[..., GunicornServer],
    api_for: Callable[[GunicornServer], ApiClient],
    fake_provider: FakeProvider,
) -> None:
    fake_provider.latency = 0.05
    cli(env, "set-budget", "--org", "acme", "--characters", str(BUDGET))
    servers = [spawn_server(workers=1, threads=4, name=n) for n in ("a", "b")]
    apis = [api_for(s) for s in servers]
    # 13-character items: 23 fit in the budget, 36 are asked for.
    jobs = [
        apis[0].create_job([f"job {j} item {i:02d}" for i in range(ITEMS_PER_JOB)])["id"]
        for j in range(3)
    ]
    answers = [apis[n % 2].generate(job_id) for n, job_id in enumerate(jobs)]
    for answer in answers:
        # A claim made after the budget ran out is refused, which is right too.
        assert answer.status_code == 202 or (
            answer.status_code == 409 and answer.json()["error"]["code"] == "budget_exceeded"
        ), answer.text
    finished: list[dict[str, Any]] = [
        apis[0].wait_job(job_id, lambda j: j["status"] != "GENERATING", timeout=60)
        for job_id in jobs
    ]
    usage = apis[1].request("GET", "/api/usage").json()
    calls = fake_provider.stats()["calls"]
    received = sum(len(text) * n for text, n in calls.items())
    assert usage["billed_characters"] == received
    assert usage["provider_calls"] == sum(calls.values())
    assert received <= BUDGET
    assert received > BUDGET - 13  # the budget was used up, not abandoned early
    assert any(j["runs"] and j["runs"][-1]["outcome"] == "OVER_BUDGET" for j in finished)
    billed_by_runs = sum(r["billed_characters"] for j in finished for r in j["runs"])
    assert billed_by_runs == received
