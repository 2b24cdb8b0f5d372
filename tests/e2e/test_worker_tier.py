"""The worker tier from the outside: gunicorn web processes that only claim, and
``flask --app wsgi worker`` processes that run, on PostgreSQL and SQLite, with real signals.

Every process gets ``SPEECHBATCH_RUNNER=worker``. The fake provider counts every (billed)
call per text, so "no item paid twice" and "the web sent nothing" are read off it. The
deployment is two gunicorn web processes (one server, two workers) and two workers.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.support.fake_provider import FakeProvider
from tests.support.server import (
    ITEM_CONCURRENCY,
    WORKER_DEAD_SECONDS,
    ApiClient,
    GunicornServer,
    Job,
    wait_until,
)
from tests.support.worker_process import WorkerProcess, backends_alive

from .conftest import Metric, ServerFactory, WorkerFactory
from .test_crash_recovery import (
    COMPLETION_TIMEOUT,
    FROZEN_RECOVERY_BUDGET,
    assert_audio_matches,
    assert_billing,
    assert_recovered,
    assert_unchanged_by_zombie,
    done_texts,
    retry_to_completion,
    start_job,
    summary,
    wait_mid_job,
    wait_settled,
)

ApiFor = Callable[[GunicornServer], ApiClient]
WORKER_MODE = {"SPEECHBATCH_RUNNER": "worker"}
# A worker's death is noticed within WORKER_DEAD_SECONDS; a few seconds more for the read.
WORKER_KILL_RECOVERY_BUDGET = WORKER_DEAD_SECONDS + 5.0


# Only on PostgreSQL: a wake-up within a second needs LISTEN/NOTIFY (on SQLite a worker
# polls every second), and freezing a process outside SQLite's write lock needs the retries
# of GunicornServer.freeze. The other tests run on both databases (``db_kind``).
POSTGRESQL_ONLY = pytest.mark.parametrize("db_kind", ["postgresql"])
# The app's idle_in_transaction_session_timeout (adapters/postgres.py).
IDLE_IN_TRANSACTION_SECONDS = 10.0


def _web(spawn_server: ServerFactory, **env: str) -> GunicornServer:
    return spawn_server(workers=2, extra_env={**WORKER_MODE, **env})


def _runner_of(workers: list[WorkerProcess], job_id: int) -> WorkerProcess:
    """The worker that took the job's run (its log says so)."""
    found = wait_until(
        lambda: [w for w in workers if w.took(job_id)], 10, what=f"a worker took job {job_id}"
    )
    assert len(found) == 1, [w.name for w in found]
    return found[0]


@dataclass
class MidRun:
    """A job mid-run in a deployment of two web processes and two workers."""

    api: ApiClient
    job_id: int
    texts: list[str]
    before: Job
    victim: WorkerProcess  # the worker running it
    survivor: WorkerProcess


def _mid_run(
    spawn_server: ServerFactory, spawn_worker: WorkerFactory, api_for: ApiFor, tag: str
) -> MidRun:
    server = _web(spawn_server)
    workers = [spawn_worker(name=f"w{n}") for n in (1, 2)]
    api = api_for(server)
    job_id, texts = start_job(api, tag)
    before = wait_mid_job(api, job_id)
    victim = _runner_of(workers, job_id)
    survivor = next(w for w in workers if w is not victim)
    return MidRun(api, job_id, texts, before, victim, survivor)


def test_web_processes_send_nothing_until_a_worker_takes_the_run(
    spawn_server: ServerFactory,
    spawn_worker: WorkerFactory,
    api_for: ApiFor,
    fake_provider: FakeProvider,
    metric: Metric,
) -> None:
    """Claims answer 202 at once; no call leaves while no worker runs; a worker then
    takes the run and finishes it, each item paid once."""
    patient = {"SPEECHBATCH_WORKER_DEAD_SECONDS": "20"}  # no recovery while workers boot
    server = _web(spawn_server, **patient)
    api = api_for(server)
    job_id, texts = start_job(api, "web-sends-nothing")
    time.sleep(1.5)
    assert fake_provider.total_calls() == 0, "a web process sent a call to the provider"
    assert api.get_job(job_id)["status"] == "GENERATING"
    workers = [spawn_worker(extra_env=patient, name=f"w{n}") for n in (1, 2)]
    final = wait_settled(api, job_id, COMPLETION_TIMEOUT, "a worker ran the job")
    assert final["status"] == "COMPLETED", summary(final)
    assert_audio_matches(api, final)
    assert {t: fake_provider.calls(t) for t in texts} == dict.fromkeys(texts, 1)
    _runner_of(workers, job_id)
    metric("total_calls", fake_provider.total_calls())


@POSTGRESQL_ONLY
def test_a_worker_takes_a_click_within_a_second(
    spawn_server: ServerFactory,
    spawn_worker: WorkerFactory,
    api_for: ApiFor,
    fake_provider: FakeProvider,
    metric: Metric,
) -> None:
    """From the click's answer to the worker's first provider call: p50 and max of 10."""
    server = _web(spawn_server)
    for n in (1, 2):
        spawn_worker(name=f"w{n}")
    api = api_for(server)
    delays = []
    for n in range(10):
        texts = [f"latency probe {n}: the quick brown fox."]
        job_id = int(api.create_job(texts, title=f"probe {n}")["id"])
        clicked = time.time()
        assert api.generate(job_id).status_code == 202
        first = _first_call_at(fake_provider, texts[0])
        delays.append(first - clicked)
        wait_settled(api, job_id, COMPLETION_TIMEOUT, "probe done")
    delays.sort()
    metric("click_to_first_call_p50_seconds", round(delays[len(delays) // 2], 3))
    metric("click_to_first_call_max_seconds", round(delays[-1], 3))
    assert delays[-1] < 1.0, delays


def _first_call_at(fake_provider: FakeProvider, text: str) -> float:
    """When the provider received its first call of ``text`` (time.time())."""
    wait_until(lambda: fake_provider.calls(text) >= 1, 5, what="the first call")
    return next(at for t, at in fake_provider.starts() if t == text)


def test_no_worker_at_all_recovers_the_run_with_a_message(
    spawn_server: ServerFactory, api_for: ApiFor, fake_provider: FakeProvider, metric: Metric
) -> None:
    """A claim that no live worker takes within WORKER_DEAD_SECONDS is recovered, saying so."""
    server = _web(spawn_server)
    api = api_for(server)
    job_id, _ = start_job(api, "no-worker")
    t0 = time.monotonic()
    job = wait_settled(api, job_id, WORKER_DEAD_SECONDS + 5.0, "recovery of an untaken run")
    assert_recovered(job, attempt=1)
    assert f"no worker took it within {WORKER_DEAD_SECONDS:g} s" in job["error_message"]
    assert fake_provider.total_calls() == 0
    metric("claim_to_failed_seconds", round(time.monotonic() - t0, 2))


def test_sigkill_of_the_running_worker_is_recovered_and_the_other_worker_retries(
    spawn_server: ServerFactory,
    spawn_worker: WorkerFactory,
    api_for: ApiFor,
    fake_provider: FakeProvider,
    metric: Metric,
) -> None:
    """An OOM kill of the worker mid-run: recovery, then a retry that the other one runs."""
    run = _mid_run(spawn_server, spawn_worker, api_for, "sigkill-worker-tier")
    api, job_id, texts, victim, survivor = run.api, run.job_id, run.texts, run.victim, run.survivor
    done_before = done_texts(run.before)
    t_kill = time.monotonic()
    victim.kill(signal.SIGKILL)
    assert victim.wait_exit(5) is not None
    recovered = wait_settled(api, job_id, WORKER_KILL_RECOVERY_BUDGET, "recovery after a kill")
    t_recovered = time.monotonic() - t_kill
    assert_recovered(recovered, attempt=1)
    assert "stopped heartbeating" in recovered["error_message"], summary(recovered)
    assert done_before <= done_texts(recovered)
    final = retry_to_completion(api, job_id, previous_attempt=1)
    assert survivor.took(job_id)
    total = assert_billing(fake_provider, texts, done_before, max_rebilled=ITEM_CONCURRENCY)
    metric("kill_to_failed_seconds", round(t_recovered, 2))
    metric("total_calls", total)
    metric("runs", [r["outcome"] for r in final["runs"]])


def test_sigterm_of_the_running_worker_interrupts_and_the_other_worker_resumes(
    spawn_server: ServerFactory,
    spawn_worker: WorkerFactory,
    api_for: ApiFor,
    fake_provider: FakeProvider,
    metric: Metric,
) -> None:
    """A deploy of the worker tier: in-flight calls finish, the run ends INTERRUPTED, the
    other worker resumes it without a click; nothing is paid twice."""
    run = _mid_run(spawn_server, spawn_worker, api_for, "sigterm-worker-tier")
    api, job_id, texts, victim, survivor = run.api, run.job_id, run.texts, run.victim, run.survivor
    t_term = time.monotonic()
    victim.kill(signal.SIGTERM)
    assert victim.wait_exit(victim.graceful_timeout + 5) == 0, victim.log_text()
    t_exit = time.monotonic() - t_term
    assert f"run interrupted job={job_id} attempt=1 won=True" in victim.log_text()
    final: Job = api.wait_job(
        job_id, lambda j: j["status"] == "COMPLETED", COMPLETION_TIMEOUT, what="resumed to the end"
    )
    t_done = time.monotonic() - t_term
    assert [(r["kind"], r["outcome"]) for r in final["runs"]] == [
        ("generate", "INTERRUPTED"),
        ("resume", "COMPLETED"),
    ], summary(final)
    assert f"resumed interrupted job={job_id}" in survivor.log_text()
    assert_audio_matches(api, final)
    assert {t: fake_provider.calls(t) for t in texts} == dict.fromkeys(texts, 1)
    metric("sigterm_to_exit_seconds", round(t_exit, 2))
    metric("sigterm_to_completed_seconds", round(t_done, 2))


@POSTGRESQL_ONLY
def test_a_frozen_worker_is_fenced_when_it_wakes(
    spawn_server: ServerFactory,
    spawn_worker: WorkerFactory,
    api_for: ApiFor,
    fake_provider: FakeProvider,
    metric: Metric,
) -> None:
    """A worker frozen mid-run (SIGSTOP) is declared dead; the retry runs on the other
    worker; thawed, the zombie writes nothing and pays for no more than its calls in flight."""
    run = _mid_run(spawn_server, spawn_worker, api_for, "sigstop-worker-tier")
    api, job_id, texts, victim, survivor = run.api, run.job_id, run.texts, run.victim, run.survivor
    t_stop = time.monotonic()
    # Frozen inside an item's transaction: PostgreSQL ends that session while the worker
    # sleeps, and the zombie's lane meets an ended session on waking, not a fence.
    ended = victim.freeze_inside_an_item_transaction()
    done_before = done_texts(api.get_job(job_id))
    recovered = wait_settled(api, job_id, FROZEN_RECOVERY_BUDGET, "recovery of a frozen worker")
    t_recovered = time.monotonic() - t_stop
    assert_recovered(recovered, attempt=1)
    final = retry_to_completion(api, job_id, previous_attempt=1)
    assert survivor.took(job_id)
    database_url = victim.env["SPEECHBATCH_DATABASE_URL"]
    wait_until(
        lambda: not backends_alive(database_url, ended),
        IDLE_IN_TRANSACTION_SECONDS + 10,
        what="PostgreSQL ended the frozen worker's session",
    )
    calls_before_cont = fake_provider.total_calls()
    victim.kill(signal.SIGCONT)
    fenced_line = f"run fenced: declared dead or superseded, stopped job={job_id} attempt=1"
    try:
        wait_until(lambda: fenced_line in victim.log_text(), 20, what="the zombie's run fenced")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the zombie's log:\n{victim.log_text(6000)}") from None
    wait_until(lambda: fake_provider.in_flight() == 0, 10, what="no call in flight")
    assert fake_provider.total_calls() - calls_before_cont <= ITEM_CONCURRENCY
    assert_unchanged_by_zombie(api, job_id, final)
    assert victim.alive, victim.log_text()
    total = assert_billing(fake_provider, texts, done_before, max_rebilled=2 * ITEM_CONCURRENCY)
    metric("freeze_to_failed_seconds", round(t_recovered, 2))
    metric("total_calls", total)
