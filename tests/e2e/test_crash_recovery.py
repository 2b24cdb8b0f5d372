"""Crash tests from the outside: real gunicorn processes, real signals, the JSON API only.

Each test runs on SQLite and on PostgreSQL (``db_kind``); those that take a
``deployment`` also run in both shapes (``runner_mode``): web processes that run their
own jobs, and web processes that only claim beside two ``flask --app wsgi worker``
processes (SPEECHBATCH_RUNNER=worker; tests/e2e/test_worker_tier.py has the rest).
The fake provider answers after 0.3 s and counts every (billed) call per text, so a
12-item job at ITEM_CONCURRENCY=2 runs for about two seconds: long enough to hit it
mid-flight.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.fake_provider import FakeProvider, fake_audio
from tests.support.server import (
    ITEM_CONCURRENCY,
    PAUSE_DIR_VARIABLE,
    PAUSE_MARKER,
    PAUSE_POINT_APP,
    PAUSED_FILE,
    RELEASE_FILE,
    TTS_TIMEOUT_SECONDS,
    WORKER_DEAD_SECONDS,
    ApiClient,
    GunicornServer,
    Job,
    group_pids,
    pid_stopped,
    runs_changed_by_zombie,
    wait_until,
)
from tests.support.worker_process import WorkerProcess

from .conftest import Metric, ServerFactory, WorkerFactory

ApiFor = Callable[[GunicornServer], ApiClient]

N_ITEMS = 12
SERVER_KILL_RECOVERY_BUDGET = WORKER_DEAD_SECONDS + 10.0  # includes booting a new server
RECOVERY_SLACK = 5.0  # after the run's dead time, for a process to notice and end it
RESPAWN_TIMEOUT = 30.0  # a respawned worker loading the app on a loaded machine
# A server frozen inside one of its short transactions holds the job's row until
# PostgreSQL ends that session (idle_in_transaction_session_timeout, 10 s); reads meanwhile
# answer the state as it is (lock_timeout 2 s) and a later read recovers (as in the chaos
# suite's FROZEN_RECOVERY_BUDGET). The start of an item is four statements since the
# budget reservation and the run's ledger line joined it, so a freeze lands there more often.
FROZEN_RECOVERY_BUDGET = WORKER_DEAD_SECONDS + 12.0
COMPLETION_TIMEOUT = 30.0


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
@dataclass
class Deployment:
    """One gunicorn server and, in worker mode, the workers that run its claims."""

    server: GunicornServer
    spawn_worker: WorkerFactory | None  # None: the web processes run the jobs
    workers: list[WorkerProcess] = field(default_factory=list)

    def start_workers(self) -> None:
        """In worker mode, start the deployment's two workers (SPEECHBATCH_RUNNER=worker)."""
        if self.spawn_worker is not None:
            name = self.server.name
            self.workers += [self.spawn_worker(name=f"{name}-w{n}") for n in (1, 2)]

    def kill_all(self) -> None:
        """SIGKILL every process of the deployment and wait until they are gone."""
        self.server.signal_group(signal.SIGKILL)
        for worker in self.workers:
            worker.kill(signal.SIGKILL)
        assert self.server.wait_exit(10) is not None, "the master survived SIGKILL"
        wait_until(lambda: not group_pids(self.server.pid), 10, what="killed group gone")
        for worker in self.workers:
            assert worker.wait_exit(10) is not None, f"{worker.name} survived SIGKILL"


DeploymentFactory = Callable[..., Deployment]


@pytest.fixture(params=["web", "worker"])
def runner_mode(request: pytest.FixtureRequest) -> str:
    """Who runs the jobs: the web processes, or a worker tier beside them."""
    return str(request.param)


@pytest.fixture
def deploy(
    spawn_server: ServerFactory, spawn_worker: WorkerFactory, runner_mode: str
) -> DeploymentFactory:
    """``deploy(name=..., workers=True)``: a started server (two web processes) and, in
    worker mode, two workers (unless ``workers=False``: ``start_workers()`` later), every
    process with SPEECHBATCH_RUNNER set to the mode; other arguments go to the server."""

    def make(name: str = "server", *, with_workers: bool = True, **kwargs: Any) -> Deployment:
        server = spawn_server(name=name, extra_env={"SPEECHBATCH_RUNNER": runner_mode}, **kwargs)
        deployment = Deployment(server, spawn_worker if runner_mode == "worker" else None)
        if with_workers:
            deployment.start_workers()
        return deployment

    return make


def texts_for(tag: str, n: int = N_ITEMS) -> list[str]:
    """Distinct item texts, so the fake's per-text counters tell items apart."""
    return [f"{tag} item {i:02d}: the quick brown fox jumps over the lazy dog." for i in range(n)]


def done_texts(job: Job) -> set[str]:
    """Texts of the job's DONE items."""
    return {item["text"] for item in job["items"] if item["status"] == "DONE"}


def summary(job: Job) -> dict[str, object]:
    """The fields worth printing when an assertion about a job fails."""
    return {
        "status": job["status"],
        "attempt": job["attempt"],
        "error_message": job["error_message"],
        "progress": job["progress"],
        "runs": job["runs"],
    }


def start_job(api: ApiClient, tag: str, n: int = N_ITEMS) -> tuple[int, list[str]]:
    """Create a job and generate it through ``api``'s server; returns (id, texts)."""
    texts = texts_for(tag, n)
    job_id = int(api.create_job(texts, title=tag)["id"])
    response = api.generate(job_id)
    assert response.status_code == 202, response.text
    started = response.json()
    assert started["status"] == "GENERATING", started
    assert started["attempt"] == 1, started
    return job_id, texts


def wait_mid_job(api: ApiClient, job_id: int, min_done: int = 3, timeout: float = 20.0) -> Job:
    """Wait until ``min_done`` items are DONE while the job still runs; return that view."""
    job = api.wait_job(
        job_id,
        lambda j: j["progress"]["done"] >= min_done or j["status"] != "GENERATING",
        timeout,
        interval=0.02,
        what=f"{min_done} items DONE",
    )
    assert job["status"] == "GENERATING", f"job ended before it could be hit: {summary(job)}"
    assert job["progress"]["done"] < job["progress"]["total"], summary(job)
    return job


def wait_settled(api: ApiClient, job_id: int, timeout: float, what: str) -> Job:
    """Wait until the job is no longer GENERATING."""
    return api.wait_job(job_id, lambda j: j["status"] != "GENERATING", timeout, what=what)


def assert_audio_matches(api: ApiClient, job: Job) -> None:
    """Every item DONE, with an audio_url serving exactly the fake's bytes for its text."""
    for item in job["items"]:
        assert item["status"] == "DONE", item
        assert item["audio_url"], item
        response = api.audio(item["audio_url"])
        assert response.status_code == 200, (item, response.status_code, response.text[:300])
        assert response.headers.get("Content-Type", "").startswith("audio/mpeg"), response.headers
        assert response.content == fake_audio(item["text"]), f"audio of {item['text']!r} differs"


def retry_to_completion(api: ApiClient, job_id: int, previous_attempt: int) -> Job:
    """POST generate (202, next attempt), wait for COMPLETED, check every audio."""
    response = api.generate(job_id)
    assert response.status_code == 202, response.text
    assert response.json()["attempt"] == previous_attempt + 1, response.json()
    final = wait_settled(api, job_id, COMPLETION_TIMEOUT, "retry finished")
    assert final["status"] == "COMPLETED", summary(final)
    assert final["attempt"] == previous_attempt + 1, summary(final)
    assert final["runs"][-1]["attempt"] == previous_attempt + 1, summary(final)
    assert final["runs"][-1]["outcome"] == "COMPLETED", summary(final)
    assert final["progress"]["done"] == final["progress"]["total"], summary(final)
    assert_audio_matches(api, final)
    return final


def assert_billing(
    fake: FakeProvider, texts: list[str], done_before: set[str], max_rebilled: int
) -> int:
    """DONE-before items billed once; every item at least once; few re-billed. Returns total."""
    counts = {text: fake.calls(text) for text in texts}
    rebilled_done = {t: n for t, n in counts.items() if t in done_before and n != 1}
    assert not rebilled_done, f"items DONE before the crash were sent again: {rebilled_done}"
    never = [t for t, n in counts.items() if n == 0]
    assert not never, f"items never sent: {never}"
    total = fake.total_calls()
    assert total - len(texts) <= max_rebilled, (
        f"{total} calls for {len(texts)} items: more than the {max_rebilled} in flight at the "
        f"crash were paid twice ({counts})"
    )
    return total


def assert_unchanged_by_zombie(api: ApiClient, job_id: int, final: Job) -> None:
    """The job reads as ``final`` (attempt 2, COMPLETED): the thawed zombie changed nothing."""
    after = api.get_job(job_id)
    assert (after["status"], after["attempt"]) == ("COMPLETED", 2), summary(after)
    changed_runs = runs_changed_by_zombie(after["runs"], final["runs"])
    assert not changed_runs, f"the fenced zombie changed its runs: {changed_runs}"
    items_before = {i["id"]: i for i in final["items"]}
    for item in after["items"]:
        was = items_before[item["id"]]
        changed = {
            k: (was[k], item[k])
            for k in ("status", "audio_url", "error_message", "updated_at")
            if was[k] != item[k]
        }
        assert not changed, f"the fenced zombie changed item {item['id']}: {changed}"
    assert_audio_matches(api, after)


def assert_recovered(job: Job, attempt: int) -> None:
    """The job was declared dead by lease/heartbeat recovery."""
    assert job["status"] == "FAILED", summary(job)
    assert (job["error_message"] or "").startswith("auto-recovered"), summary(job)
    assert job["attempt"] == attempt, summary(job)
    assert job["runs"], summary(job)
    assert job["runs"][-1]["attempt"] == attempt, summary(job)
    assert job["runs"][-1]["outcome"] == "RECOVERED", summary(job)
    assert job["progress"]["generating"] == 0, summary(job)


# --------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------
def test_sigkill_server_mid_job_is_recovered_and_retry_completes(
    deploy: DeploymentFactory,
    api_for: ApiFor,
    fake_provider: FakeProvider,
    metric: Metric,
) -> None:
    """A deploy that SIGKILLs every process (master, its workers, the worker tier): a
    fresh deployment recovers, a retry resumes."""
    deployment = deploy()
    api = api_for(deployment.server)
    job_id, texts = start_job(api, "sigkill-server")
    before = wait_mid_job(api, job_id)
    done_before = done_texts(before)

    t_kill = time.monotonic()
    deployment.kill_all()
    calls_at_kill = fake_provider.total_calls()

    # Recovery is the web's (its reads); the worker tier boots after it, for the retry.
    fresh = deploy(name="restarted", with_workers=False)
    t_up = time.monotonic() - t_kill
    api = api_for(fresh.server)
    recovered = wait_settled(api, job_id, SERVER_KILL_RECOVERY_BUDGET, "auto-recovery")
    t_recovered = time.monotonic() - t_kill
    assert_recovered(recovered, attempt=1)
    assert t_recovered <= SERVER_KILL_RECOVERY_BUDGET
    assert done_before <= done_texts(recovered), "DONE items were lost by the crash"

    fresh.start_workers()
    final = retry_to_completion(api, job_id, previous_attempt=1)
    total = assert_billing(fake_provider, texts, done_before, max_rebilled=ITEM_CONCURRENCY)

    metric("restart_seconds", round(t_up, 2))
    metric("kill_to_failed_seconds", round(t_recovered, 2))
    metric("done_before_kill", len(done_before))
    metric("calls_at_kill", calls_at_kill)
    metric("total_calls", total)
    metric("runs", [r["outcome"] for r in final["runs"]])


def test_sigkill_only_worker_is_recovered(
    spawn_server: ServerFactory,
    api_for: ApiFor,
    fake_provider: FakeProvider,
    metric: Metric,
) -> None:
    """An OOM kill of the worker running the job: the master respawns it, recovery follows."""
    server = spawn_server()
    api = api_for(server)
    job_id, texts = start_job(api, "sigkill-worker")
    before = wait_mid_job(api, job_id)
    done_before = done_texts(before)

    # We do not know which worker runs the job: kill them all, the master stays up.
    t_kill = time.monotonic()
    killed = set(server.kill_workers(signal.SIGKILL))
    assert killed, "no worker to kill"
    # The respawn is gunicorn's and the app's boot, as long as the machine's load makes it
    # (over 5 s on a busy CI); the recovery is ours: once a process exists again, within
    # the budget of the run's own dead time.
    new_workers = server.wait_for_workers(exclude=killed, timeout=RESPAWN_TIMEOUT)
    t_respawn = time.monotonic() - t_kill
    assert server.alive, "the master died with its workers"
    calls_at_kill = fake_provider.total_calls()

    budget = max(WORKER_DEAD_SECONDS, t_respawn) + RECOVERY_SLACK
    remaining = max(1.0, budget - (time.monotonic() - t_kill))
    recovered = wait_settled(api, job_id, remaining, "auto-recovery after a worker kill")
    t_recovered = time.monotonic() - t_kill
    assert_recovered(recovered, attempt=1)
    assert t_recovered <= budget, (t_recovered, t_respawn)
    assert done_before <= done_texts(recovered), "DONE items were lost by the crash"

    final = retry_to_completion(api, job_id, previous_attempt=1)
    total = assert_billing(fake_provider, texts, done_before, max_rebilled=ITEM_CONCURRENCY)
    assert server.alive and set(server.worker_pids()) & set(new_workers)

    metric("respawn_seconds", round(t_respawn, 2))
    metric("kill_to_failed_seconds", round(t_recovered, 2))
    metric("done_before_kill", len(done_before))
    metric("calls_at_kill", calls_at_kill)
    metric("total_calls", total)
    metric("runs", [r["outcome"] for r in final["runs"]])


def test_sigstop_zombie_is_fenced(
    spawn_server: ServerFactory,
    api_for: ApiFor,
    fake_provider: FakeProvider,
    metric: Metric,
) -> None:
    """A frozen server (SIGSTOP) is declared dead; when it wakes it must not write anything."""
    server_a = spawn_server(name="a")
    server_b = spawn_server(name="b")
    api_a, api_b = api_for(server_a), api_for(server_b)
    job_id, texts = start_job(api_a, "sigstop")  # claimed by A: A runs it
    wait_mid_job(api_b, job_id)

    t_stop = time.monotonic()
    freezes = server_a.freeze()
    calls_at_freeze = fake_provider.total_calls()
    frozen_view = api_b.get_job(job_id)
    done_before = done_texts(frozen_view)

    recovered = wait_settled(
        api_b, job_id, FROZEN_RECOVERY_BUDGET, "auto-recovery of a frozen server's job"
    )
    t_recovered = time.monotonic() - t_stop
    assert_recovered(recovered, attempt=1)

    final = retry_to_completion(api_b, job_id, previous_attempt=1)
    calls_before_cont = fake_provider.total_calls()

    server_a.signal_group(signal.SIGCONT)
    t_cont = time.monotonic()
    # Let A's threads wake up, get their answers or time out, meet the fence and stop.
    time.sleep(TTS_TIMEOUT_SECONDS + 2.0)
    wait_until(lambda: fake_provider.in_flight() == 0, 10, what="no call in flight")
    calls_after_cont = fake_provider.total_calls() - calls_before_cont

    for api in (api_b, api_a):  # A is alive again and must read the same thing
        assert_unchanged_by_zombie(api, job_id, final)

    assert calls_after_cont <= ITEM_CONCURRENCY, (
        f"the zombie made {calls_after_cont} provider calls after SIGCONT"
    )
    assert server_a.alive, f"A died after SIGCONT:\n{server_a.log_text()}"
    total = assert_billing(fake_provider, texts, done_before, max_rebilled=2 * ITEM_CONCURRENCY)

    metric("freeze_tries", freezes)
    metric("freeze_to_failed_seconds", round(t_recovered, 2))
    metric("done_at_freeze", len(done_before))
    metric("calls_at_freeze", calls_at_freeze)
    metric("calls_after_sigcont", calls_after_cont)
    metric("observed_after_sigcont_seconds", round(time.monotonic() - t_cont, 2))
    metric("total_calls", total)


def test_zombie_frozen_before_its_call_pays_nothing(
    spawn_server: ServerFactory,
    api_for: ApiFor,
    fake_provider: FakeProvider,
    tmp_path: Path,
    metric: Metric,
) -> None:
    """A server frozen (SIGSTOP) between an item's fenced start and its provider call, while
    another server recovers the job and completes the item, sends no call when it wakes.

    The freeze lands in that window on purpose: A runs the pause-point entry, whose item
    waits there until the test releases it (tests/support/pause_point.py).
    """
    pause_dir = tmp_path / "pause"
    pause_dir.mkdir()
    server_a = spawn_server(
        name="a", workers=1, app=PAUSE_POINT_APP, extra_env={PAUSE_DIR_VARIABLE: str(pause_dir)}
    )
    server_b = spawn_server(name="b")
    api_a, api_b = api_for(server_a), api_for(server_b)
    text = f"zombie {PAUSE_MARKER}: the quick brown fox jumps over the lazy dog."
    job_id = int(api_a.create_job([text], title="zombie")["id"])
    response = api_a.generate(job_id)  # claimed by A: A runs it
    assert response.status_code == 202, response.text

    paused = pause_dir / PAUSED_FILE
    wait_until(paused.exists, 20, what="A's item at its pause point, after its fenced start")
    zombie_pid = int(paused.read_text())
    assert zombie_pid in server_a.worker_pids()
    t_stop = time.monotonic()
    server_a.freeze()
    wait_until(lambda: pid_stopped(zombie_pid), 5, what="A frozen")
    # Thawed, A goes straight on to its provider call: nothing holds it back but the fence.
    (pause_dir / RELEASE_FILE).touch()

    recovered = wait_settled(
        api_b, job_id, FROZEN_RECOVERY_BUDGET, "auto-recovery of the frozen server's job"
    )
    t_recovered = time.monotonic() - t_stop
    assert_recovered(recovered, attempt=1)
    final = retry_to_completion(api_b, job_id, previous_attempt=1)
    assert fake_provider.calls(text) == 1  # B's call; A never got to send its own

    server_a.signal_group(signal.SIGCONT)
    t_cont = time.monotonic()
    fenced_line = f"run fenced: declared dead or superseded, stopped job={job_id} attempt=1"
    wait_until(lambda: fenced_line in server_a.log_text(), 20, what="A's run stopped, fenced")
    assert fake_provider.in_flight() == 0
    assert fake_provider.calls(text) == 1, "the thawed zombie paid for a call"

    for api in (api_b, api_a):  # A is alive again and must read the same thing
        assert_unchanged_by_zombie(api, job_id, final)
    assert server_a.alive, f"A died after SIGCONT:\n{server_a.log_text()}"

    metric("freeze_to_failed_seconds", round(t_recovered, 2))
    metric("sigcont_to_fenced_seconds", round(time.monotonic() - t_cont, 2))
    metric("zombie_calls", fake_provider.calls(text) - 1)


def test_double_click_claims_once(
    deploy: DeploymentFactory,
    api_for: ApiFor,
    fake_provider: FakeProvider,
    metric: Metric,
) -> None:
    """20 simultaneous generate calls over 2 web processes: one 202, nineteen 409s, one run."""
    deployment = deploy(workers=2, threads=4)
    api = api_for(deployment.server)
    texts = texts_for("double-click")
    job_id = int(api.create_job(texts, title="double-click")["id"])
    clicks = 20
    barrier = threading.Barrier(clicks)

    def click(_: int) -> requests.Response:
        barrier.wait(10)
        return api.generate(job_id)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=clicks) as pool:
        responses = list(pool.map(click, range(clicks)))
    t_burst = time.monotonic() - t0

    by_status = Counter(r.status_code for r in responses)
    assert by_status == {202: 1, 409: clicks - 1}, {
        s: [r.text[:200] for r in responses if r.status_code == s][:2] for s in by_status
    }
    codes = Counter(r.json()["error"]["code"] for r in responses if r.status_code == 409)
    assert codes == {"already_generating": clicks - 1}, codes
    winner = next(r.json() for r in responses if r.status_code == 202)
    assert winner["attempt"] == 1, winner

    final = wait_settled(api, job_id, COMPLETION_TIMEOUT, "the single run finished")
    assert final["status"] == "COMPLETED", summary(final)
    assert final["attempt"] == 1 and len(final["runs"]) == 1, summary(final)
    assert_audio_matches(api, final)
    assert {t: fake_provider.calls(t) for t in texts} == dict.fromkeys(texts, 1)

    metric("burst_seconds", round(t_burst, 2))
    metric("statuses", dict(by_status))
    metric("total_calls", fake_provider.total_calls())


def test_fake_provider_is_reachable_from_outside(fake_provider: FakeProvider) -> None:
    """Sanity of the harness itself: the fake bills, fails on demand and reports stats."""
    base = fake_provider.url
    headers = {"Authorization": "Bearer test-key"}
    body = {"model": "m", "input": "hello", "voice": "alloy", "response_format": "mp3"}
    fake_provider.latency = 0.0
    ok = requests.post(f"{base}/audio/speech", json=body, headers=headers, timeout=5)
    assert ok.status_code == 200 and ok.content == fake_audio("hello")
    assert ok.headers["Content-Type"] == "audio/mpeg"
    fake_provider.fail_next(1, 429, retry_after=1)
    limited = requests.post(f"{base}/audio/speech", json=body, headers=headers, timeout=5)
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "1"
    wrong_key = requests.post(f"{base}/audio/speech", json=body, timeout=5)
    assert wrong_key.status_code == 401
    stats = requests.get(base.removesuffix("/v1") + "/stats", timeout=5).json()
    assert stats["calls"] == {"hello": 2} and stats["total"] == 2
    assert fake_provider.calls("hello") == 2
    fake_provider.reset()
    assert fake_provider.total_calls() == 0
