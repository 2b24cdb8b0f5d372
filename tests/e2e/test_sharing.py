"""Sharing the provider across a deployment, and resume after a deploy, end to end.

Two gunicorn servers of two workers each on one PostgreSQL database, against the counting
fake provider (which records the most calls ever in flight at once and when each arrived).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import psycopg
import pytest

from tests.support.fake_provider import FakeProvider
from tests.support.server import (
    GRACEFUL_TIMEOUT,
    WORKER_DEAD_SECONDS,
    ApiClient,
    GunicornServer,
    Job,
    group_pids,
    wait_until,
)

from .conftest import Metric, ServerFactory
from .test_crash_recovery import (
    assert_audio_matches,
    assert_billing,
    done_texts,
    start_job,
    summary,
    texts_for,
    wait_mid_job,
)

ApiFor = Callable[[GunicornServer], ApiClient]


@pytest.fixture
def db_kind() -> str:
    """These tests are about a deployment of several servers: PostgreSQL only."""
    return "postgresql"


def _two_servers(spawn_server: ServerFactory, **env: str) -> tuple[GunicornServer, ...]:
    shared = {f"SPEECHBATCH_{name}": value for name, value in env.items()}
    return tuple(spawn_server(name=name, workers=2, extra_env=shared) for name in ("a", "b"))


def _generate(api: ApiClient, tag: str, n: int) -> tuple[int, list[str]]:
    texts = texts_for(tag, n)
    job_id = int(api.create_job(texts, title=tag)["id"])
    response = api.generate(job_id)
    assert response.status_code == 202, response.text
    return job_id, texts


def _completed(api: ApiClient, job_id: int, timeout: float) -> Job:
    job = api.wait_job(job_id, lambda j: j["status"] != "GENERATING", timeout, what="finished")
    assert job["status"] == "COMPLETED", summary(job)
    return job


def test_calls_in_flight_never_exceed_the_cap(
    spawn_server: ServerFactory, api_for: ApiFor, fake_provider: FakeProvider, metric: Metric
) -> None:
    a, b = _two_servers(spawn_server, PROVIDER_CONCURRENCY="3", ITEM_CONCURRENCY="4")
    fake_provider.latency = 0.2
    jobs = [_generate(api_for(server), f"cap {n}", 10) for n, server in enumerate([a, b, a, b])]
    for job_id, _ in jobs:
        _completed(api_for(a), job_id, 60)
    assert fake_provider.total_calls() == 40
    assert fake_provider.max_in_flight() <= 3
    metric("max_in_flight", fake_provider.max_in_flight())


def test_a_small_job_finishes_while_a_large_one_runs(
    spawn_server: ServerFactory, api_for: ApiFor, fake_provider: FakeProvider, metric: Metric
) -> None:
    a, b = _two_servers(spawn_server, PROVIDER_CONCURRENCY="2", ITEM_CONCURRENCY="4")
    fake_provider.latency = 0.3
    large, _ = _generate(api_for(a), "large", 40)
    api_for(a).wait_job(large, lambda j: j["progress"]["done"] >= 2, 20, what="large started")
    t0 = time.monotonic()
    small, _ = _generate(api_for(b), "small", 2)
    _completed(api_for(b), small, 20)
    small_seconds = time.monotonic() - t0
    assert api_for(a).get_job(large)["status"] == "GENERATING"
    _completed(api_for(a), large, 60)
    metric("small_job_seconds_behind_a_large_one", round(small_seconds, 2))


def test_calls_per_ten_seconds_stay_within_the_pace(
    spawn_server: ServerFactory, api_for: ApiFor, fake_provider: FakeProvider, metric: Metric
) -> None:
    rpm = 120  # one start every half second: at most 120/6 + 2 = 22 in any 10 s
    a, b = _two_servers(spawn_server, PROVIDER_RPM=str(rpm), ITEM_CONCURRENCY="4")
    fake_provider.latency = 0.05
    jobs = [_generate(api_for(server), f"pace {n}", 13) for n, server in enumerate([a, b])]
    for job_id, _ in jobs:
        _completed(api_for(a), job_id, 60)
    starts = sorted(t for _, t in fake_provider.starts())
    assert len(starts) == 26
    busiest = max(sum(1 for t in starts if s <= t < s + 10.0) for s in starts)
    assert busiest <= rpm / 6 + 2, busiest
    metric("busiest_10s_window_starts", busiest)


def test_a_sigkilled_workers_slots_free_within_worker_dead_seconds(
    spawn_server: ServerFactory, api_for: ApiFor, fake_provider: FakeProvider, metric: Metric
) -> None:
    a, b = _two_servers(spawn_server, PROVIDER_CONCURRENCY="2", ITEM_CONCURRENCY="2")
    fake_provider.latency = 8.0  # the first job's calls hold both slots past the budget
    stuck, _ = _generate(api_for(a), "stuck", 2)
    wait_until(lambda: fake_provider.in_flight() == 2, 10, what="both slots held")
    a.kill_workers(signal.SIGKILL)
    t_kill = time.monotonic()
    fake_provider.latency = 0.1
    job_id, texts = _generate(api_for(b), "after kill", 3)
    wait_until(
        lambda: any(fake_provider.calls(t) for t in texts), WORKER_DEAD_SECONDS + 5, what="a slot"
    )
    freed_after = time.monotonic() - t_kill
    _completed(api_for(b), job_id, 30)
    assert freed_after <= WORKER_DEAD_SECONDS + 2.0, freed_after
    metric("slot_free_after_sigkill_seconds", round(freed_after, 2))
    del stuck


def _job_row(database_url: str, job_id: int) -> dict[str, object]:
    """The job as stored, read while no server runs (so nothing can resume it meanwhile)."""
    with psycopg.connect(database_url.replace("+psycopg", "")) as conn:
        status, attempt, outcome, message = conn.execute(
            "SELECT j.status, j.attempt, r.outcome, r.error_message FROM jobs j "
            "JOIN runs r ON r.job_id = j.id AND r.attempt = j.attempt WHERE j.id = %s",
            (job_id,),
        ).fetchone()  # type: ignore[misc]
        counts: dict[str, int] = dict(
            conn.execute(
                "SELECT status, count(*) FROM items WHERE job_id = %s GROUP BY status", (job_id,)
            ).fetchall()
        )
    return {"status": status, "attempt": attempt, "outcome": outcome, "message": message,
            "items": counts}  # fmt: skip


def test_a_deploy_resumes_the_job_without_a_click(
    spawn_server: ServerFactory,
    api_for: ApiFor,
    fake_provider: FakeProvider,
    metric: Metric,
    app_database_url: str,
) -> None:
    server = spawn_server(name="old")
    api = api_for(server)
    job_id, texts = start_job(api, "deploy", n=30)
    done_before = done_texts(wait_mid_job(api, job_id))
    t_term = time.monotonic()
    server.kill(signal.SIGTERM)
    assert server.wait_exit(GRACEFUL_TIMEOUT + 3) is not None, server.log_text()
    wait_until(lambda: not group_pids(server.pid), 5, what="stopped group gone")
    stopped = _job_row(app_database_url, job_id)
    assert (stopped["status"], stopped["attempt"], stopped["outcome"]) == (
        "FAILED", 1, "INTERRUPTED",
    ), stopped  # fmt: skip
    assert not str(stopped["message"]).startswith("auto-recovered"), stopped
    items = stopped["items"]
    assert isinstance(items, dict) and "GENERATING" not in items, stopped
    assert len(done_before) <= items.get("DONE", 0) < len(texts), "the drain never stopped"

    fresh = spawn_server(name="new")
    t_up = time.monotonic()
    api = api_for(fresh)
    job = api.wait_job(
        job_id,
        lambda j: j["attempt"] == 2,
        WORKER_DEAD_SECONDS + 2,
        what="resumed without a click",
    )
    resumed_after = time.monotonic() - t_up
    final = _completed(api, job_id, 60)
    interrupted, resumed = final["runs"]
    assert interrupted["outcome"] == "INTERRUPTED", summary(final)
    assert (resumed["kind"], resumed["started_by"]) == ("resume", None), summary(final)
    assert resumed["outcome"] == "COMPLETED", summary(final)
    assert_audio_matches(api, final)
    # A graceful stop lets in-flight calls finish: nothing at all is paid twice.
    assert_billing(fake_provider, texts, done_before, max_rebilled=0)
    metric("resumed_seconds_after_new_server_up", round(resumed_after, 2))
    metric("deploy_to_resume_seconds", round(time.monotonic() - t_term, 2))
    del job


def test_a_cancelled_job_is_never_resumed(
    spawn_server: ServerFactory, api_for: ApiFor, fake_provider: FakeProvider
) -> None:
    server = spawn_server(name="old")
    api = api_for(server)
    job_id, _ = start_job(api, "cancelled", n=30)
    wait_mid_job(api, job_id)
    response = api.request("POST", f"/api/jobs/{job_id}/cancel")
    assert response.status_code == 200, response.text
    server.kill(signal.SIGTERM)
    assert server.wait_exit(GRACEFUL_TIMEOUT + 3) is not None, server.log_text()
    calls = fake_provider.total_calls()
    fresh = spawn_server(name="new")
    time.sleep(2 * WORKER_DEAD_SECONDS)
    job = api_for(fresh).get_job(job_id)
    assert job["status"] == "FAILED", summary(job)
    assert [r["outcome"] for r in job["runs"]] == ["CANCELLED"], summary(job)
    assert fake_provider.total_calls() == calls
