"""The chaos suite in worker mode (SPEECHBATCH_RUNNER=worker): a gunicorn web tier that
only claims, and two ``flask --app wsgi worker`` processes that run the claims.

Seeded crash runs (replay with CHAOS_SEED=N; CHAOS_WORKER_RUNS=N runs, default 8): a job
is generated through the web tier, and at a random moment the worker running it is
SIGKILLed (recovered, then retried) or SIGTERMed (interrupted, then resumed by the other
worker without a click), the other worker is killed (the job runs through), or the whole
web tier is killed (the job runs through: the web runs nothing). After every run the
invariants of test_chaos_crash_runs.py's crash runs are checked from outside.
"""

from __future__ import annotations

import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.server import ApiClient, GunicornServer, Job, group_pids, wait_until
from tests.support.worker_process import WorkerProcess

from .chaos_helpers import MAX_RETRIES, new_tag, unique_texts
from .chaos_provider import ChaosFakeProvider
from .conftest import Spawn
from .harness import (
    AUTO_RECOVERED,
    PROVIDER_CONCURRENCY,
    SETTLE_TIMEOUT,
    WORKER_DEAD_SECONDS,
    WORKER_KILL_RECOVERY_BUDGET,
    ChaosReport,
    Checks,
    Database,
    Observer,
    Row,
    chaos_env,
    check_completed_job,
    check_jobs_health,
    done_texts,
    env_int,
    job_summary,
    worker_pid,
)

N_RUNS = env_int("CHAOS_WORKER_RUNS", 8)
KILL_JOB_WORKER = "kill-job-worker"
TERM_JOB_WORKER = "term-job-worker"
KILL_OTHER_WORKER = "kill-other-worker"
KILL_WEB = "kill-web"
KINDS = (KILL_JOB_WORKER, TERM_JOB_WORKER, KILL_OTHER_WORKER, KILL_WEB)
GRACEFUL_TIMEOUT = 10.0
# A SIGTERMed worker's run is resumed by the other worker's resume tick (every quarter of
# WORKER_DEAD_SECONDS) and then runs to the end.
RESUME_BUDGET = WORKER_DEAD_SECONDS + SETTLE_TIMEOUT


@dataclass
class Tiers:
    """The deployment under test: one web server and the worker processes."""

    env: dict[str, str]
    spawn: Spawn
    log_dir: Path
    web: GunicornServer
    workers: list[WorkerProcess] = field(default_factory=list)
    started: int = 0

    def start_worker(self) -> WorkerProcess:
        """Start one more worker."""
        self.started += 1
        worker = WorkerProcess(
            self.env, self.log_dir, name=f"worker-{self.started}", graceful_timeout=GRACEFUL_TIMEOUT
        ).start()
        self.workers.append(worker)
        return worker

    def replace(self, dead: WorkerProcess) -> None:
        """Reap a worker that was killed or stopped and start another in its place."""
        dead.stop(graceful=False)
        self.workers.remove(dead)
        self.start_worker()

    def running(self, job: Job) -> WorkerProcess | None:
        """The worker whose PID the job's lease names."""
        pid = worker_pid(job)
        return next((w for w in self.workers if w.proc is not None and w.pid == pid), None)

    def restart_web(self, name: str) -> None:
        """SIGKILL the web tier's whole group and start a fresh one."""
        old = self.web
        old.signal_group(signal.SIGKILL)
        old.wait_exit(10)
        wait_until(lambda: not group_pids(old.pid), 10, what="killed web tier gone")
        old.stop(graceful=False)
        self.web = self.spawn(self.env, name=name)


def one_worker_crash_run(
    tiers: Tiers, obs: Observer, rng: random.Random, seed: int, index: int, kind: str
) -> tuple[int, Row]:
    """Generate a job, hit the deployment as ``kind`` says mid-run, settle, check; its id."""
    n = rng.randint(6, 15)
    target = rng.randint(0, n - 4)
    tag = new_tag(f"w{index:02d}")
    texts = unique_texts(rng, tag, n)
    checks = Checks(f"seed={seed} run=w{index:02d} {kind} done>={target} n={n}")
    obs.context = checks.context
    row = Row(run=f"w{index:02d}", fault=kind, moment=f"done>={target}")
    job_id = int(obs.create_job(texts, title=tag)["id"])
    response = obs.generate(job_id)
    checks.check("claim 202", response.status_code == 202, response.text[:300])
    observed = obs.wait(
        job_id,
        lambda j: (
            (j["progress"]["done"] >= target and worker_pid(j) is not None)
            or j["status"] != "GENERATING"
        ),
        SETTLE_TIMEOUT,
        f"{target} items DONE",
        interval=0.02,
    )
    done_before = done_texts(observed)
    running = tiers.running(observed)
    t_fault = time.monotonic()
    settled = _fault(tiers, obs, checks, kind, job_id, running, index)
    row.recovery_s = time.monotonic() - t_fault
    final = _retry_to_completion(obs, checks, job_id, settled)
    check_completed_job(
        checks, obs, Database(tiers.env["SPEECHBATCH_DATABASE_URL"]),
        Path(tiers.env["SPEECHBATCH_STORAGE_DIR"]), final, texts, billed_once=done_before,
    )  # fmt: skip
    row.checks = checks.passed
    row.result = "ok"
    row.note = f"n={n} done@fault={len(done_before)} runs={[r['outcome'] for r in final['runs']]}"
    return job_id, row


def _fault(
    tiers: Tiers,
    obs: Observer,
    checks: Checks,
    kind: str,
    job_id: int,
    running: WorkerProcess | None,
    index: int,
) -> Job:
    """Hit the deployment; the job once it has settled after the fault."""
    if running is None:
        # The run ended before it could be hit: nothing runs it any more.
        return obs.settled(job_id, SETTLE_TIMEOUT, "the run that ended before the fault")
    if kind == KILL_WEB:
        tiers.restart_web(f"web-{index + 1}")
        obs.use(ApiClient(tiers.web.base_url, obs.api.token))
        settled = obs.settled(job_id, SETTLE_TIMEOUT, "the run goes on without the web tier")
        checks.check("the job ran through", settled["status"] == "COMPLETED", job_summary(settled))
        return settled
    if kind == KILL_OTHER_WORKER:
        bystander = next(w for w in tiers.workers if w is not running)
        bystander.kill(signal.SIGKILL)
        settled = obs.settled(job_id, SETTLE_TIMEOUT, "the run goes on beside a killed worker")
        checks.check("the job ran through", settled["status"] == "COMPLETED", job_summary(settled))
        tiers.replace(bystander)
        return settled
    if kind == TERM_JOB_WORKER:
        running.kill(signal.SIGTERM)
        code = running.wait_exit(GRACEFUL_TIMEOUT + 5)
        checks.check("a SIGTERMed worker exits 0 within its grace", code == 0, code)
        tiers.replace(running)
        settled = obs.wait(
            job_id, lambda j: j["status"] == "COMPLETED", RESUME_BUDGET, "resumed by a worker"
        )
        outcomes = [(r["kind"], r["outcome"]) for r in settled["runs"]]
        checks.check(
            "interrupted, then resumed without a click",
            outcomes in ([("generate", "COMPLETED")], [("generate", "INTERRUPTED"),
                                                       ("resume", "COMPLETED")]),
            outcomes,
        )  # fmt: skip
        return settled
    running.kill(signal.SIGKILL)
    settled = obs.settled(job_id, WORKER_KILL_RECOVERY_BUDGET, "recovery of a killed worker")
    tiers.replace(running)
    last = settled["runs"][-1]
    checks.check(
        "recovered because its worker stopped heartbeating (or it had completed)",
        last["outcome"] == "COMPLETED"
        or (
            last["outcome"] == "RECOVERED"
            and (last["error_message"] or "").startswith(AUTO_RECOVERED)
            and "stopped heartbeating" in (last["error_message"] or "")
        ),
        job_summary(settled),
    )
    return settled


def _retry_to_completion(obs: Observer, checks: Checks, job_id: int, job: Job) -> Job:
    retries = 0
    while job["status"] != "COMPLETED":
        checks.check("retries bounded", retries < MAX_RETRIES, job_summary(job))
        response = obs.generate(job_id)
        checks.check("retry claimed (202)", response.status_code == 202, response.text[:300])
        job = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        retries += 1
    return job


def test_randomized_worker_tier_crash_runs(
    chaos_db: tuple[str, str],
    fake: ChaosFakeProvider,
    spawn: Spawn,
    tmp_path: Path,
    chaos_seed: int,
    chaos_report: ChaosReport,
) -> None:
    """Seeded runs against web + worker tiers: kill or stop workers and the web mid-job."""
    url, token = chaos_db
    rng = random.Random(chaos_seed + 1)
    kinds = [KINDS[i % len(KINDS)] for i in range(N_RUNS)]
    rng.shuffle(kinds)
    env = {**chaos_env(url, fake.url, tmp_path / "audio"), "SPEECHBATCH_RUNNER": "worker"}
    tiers = Tiers(env, spawn, tmp_path, spawn(env, name="web-1"))
    job_ids: list[int] = []
    try:
        for _ in range(2):
            tiers.start_worker()
        obs = Observer(ApiClient(tiers.web.base_url, token), fake, f"seed={chaos_seed}")
        for index, kind in enumerate(kinds, start=1):
            fake.latency = rng.uniform(0.05, 0.15)
            job_id, row = one_worker_crash_run(tiers, obs, rng, chaos_seed, index, kind)
            chaos_report.add(row)
            job_ids.append(job_id)
        checks = Checks(f"seed={chaos_seed} all worker-tier runs")
        check_jobs_health(checks, Database(url), job_ids)
        peak = fake.stats()["max_in_flight"]
        checks.check("calls in flight never above the cap", peak <= PROVIDER_CONCURRENCY, peak)
        chaos_report.add(Row(run="workers-all", fault="tables", checks=checks.passed, result="ok"))
    finally:
        for worker in tiers.workers:
            worker.stop(graceful=False)
