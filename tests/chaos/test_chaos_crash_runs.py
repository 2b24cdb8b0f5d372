"""The randomized crash runs: real gunicorn processes on PostgreSQL whose server, job
worker, bystander worker or all workers are SIGKILLed mid-job, recovered, retried and
checked; some crash runs kill the Generate that follows edits of a job's lines, and
restore a take after the retries. A webhook receiver must be told of every run that
ended despite the kills. The runs are randomized from one seed (printed; replay with
CHAOS_SEED=N; CHAOS_RUNS=N runs).
"""

from __future__ import annotations

import contextlib
import random
import time
from pathlib import Path

import requests

from tests.support.server import ApiClient
from tests.support.webhook_receiver import Receiver

from .chaos_helpers import with_log
from .chaos_provider import ChaosFakeProvider
from .conftest import Spawn
from .crash_run import one_crash_run
from .crash_steps import CrashContext, plan_kinds
from .harness import (
    ITEM_CONCURRENCY,
    JOB_EVENTS,
    PROVIDER_CONCURRENCY,
    THREADS,
    TTS_MAX_ATTEMPTS,
    TTS_TIMEOUT_SECONDS,
    WORKER_DEAD_SECONDS,
    WORKERS,
    ChaosReport,
    Checks,
    Database,
    Observer,
    Row,
    chaos_env,
    check_jobs_health,
    check_run_events_delivered,
    env_int,
)

N_RUNS = env_int("CHAOS_RUNS", 15)
CRASH_RUNS_BUDGET = max(200.0, 8.0 * N_RUNS)
# After the last run: a delivery held by a killed worker goes out again within
# WORKER_DEAD_SECONDS; the rest is the senders' polls and retries.
WEBHOOK_DELIVERY_BUDGET = 30.0  # seconds for all the crash runs (~2.3 s each)


def test_randomized_crash_runs(
    chaos_db: tuple[str, str],
    fake: ChaosFakeProvider,
    spawn: Spawn,
    tmp_path: Path,
    chaos_seed: int,
    chaos_report: ChaosReport,
) -> None:
    """26 seeded runs: SIGKILL the server or workers mid-job, recover, retry, check it all;
    a webhook receiver is told of every run that ended, despite the kills."""
    url, token = chaos_db
    rng = random.Random(chaos_seed)
    kinds = plan_kinds(rng, N_RUNS)
    storage = tmp_path / "audio"
    env = chaos_env(url, fake.url, storage)
    server = spawn(env, name="crash-1")
    receiver = Receiver()
    api = ApiClient(server.base_url, token)
    created = api.request("POST", "/api/webhooks", {"url": receiver.url, "events": JOB_EVENTS})
    assert created.status_code == 201, created.text[:300]
    receiver.secret = created.json()["secret"]
    ctx = CrashContext(
        rng=rng,
        seed=chaos_seed,
        env=env,
        token=token,
        fake=fake,
        db=Database(url),
        storage=storage,
        spawn=spawn,
        server=server,
        obs=Observer(api, fake, f"seed={chaos_seed}"),
        report=chaos_report,
    )
    try:
        crash_runs(ctx, kinds, receiver)
    finally:
        # The database is the folder's: the other tests' runs are not told to a receiver
        # that is gone.
        with contextlib.suppress(requests.RequestException):
            ctx.obs.api.request("DELETE", f"/api/webhooks/{created.json()['id']}")
        receiver.stop()


def crash_runs(ctx: CrashContext, kinds: list[str], receiver: Receiver) -> None:
    """The crash runs one after the other, then the checks over all of them."""
    chaos_seed, fake, chaos_report = ctx.seed, ctx.fake, ctx.report
    print(f"\ncrash runs: CHAOS_SEED={chaos_seed} kinds={kinds}")
    chaos_report.figures["knobs"] = (
        f"WORKER_DEAD={WORKER_DEAD_SECONDS:g}s TTS_TIMEOUT={TTS_TIMEOUT_SECONDS:g}s "
        f"MAX_ATTEMPTS={TTS_MAX_ATTEMPTS} ITEM_CONCURRENCY={ITEM_CONCURRENCY} "
        f"PROVIDER_CONCURRENCY={PROVIDER_CONCURRENCY} "
        f"gunicorn {WORKERS}x{THREADS}, {N_RUNS} crash runs"
    )
    started = time.monotonic()
    for index, kind in enumerate(kinds, start=1):
        elapsed = time.monotonic() - started
        assert elapsed < CRASH_RUNS_BUDGET, (
            f"seed={chaos_seed}: {index - 1} runs took {elapsed:.0f} s, over the budget"
        )
        try:
            one_crash_run(ctx, index, kind)
        except BaseException as exc:
            chaos_report.rows[-1].result = "FAIL"
            if isinstance(exc, AssertionError):
                raise with_log(exc, ctx.server) from exc
            raise
    wall = time.monotonic() - started
    checks = Checks(f"seed={chaos_seed} all crash runs")
    check_jobs_health(checks, ctx.db, ctx.job_ids)
    checks.check("no 5xx over all the runs", not ctx.obs.server_errors, ctx.obs.server_errors)
    peak = fake.stats()["max_in_flight"]
    checks.check(
        "calls in flight never above PROVIDER_CONCURRENCY, dead holders' slots included",
        peak <= PROVIDER_CONCURRENCY,
        peak,
    )
    chaos_report.figures["webhooks"] = check_run_events_delivered(
        checks, ctx.db, receiver, ctx.job_ids, timeout=WEBHOOK_DELIVERY_BUDGET
    )
    for kind, values in sorted(ctx.recovery.items()):
        values.sort()
        chaos_report.figures[f"recovery s after {kind}"] = (
            f"n={len(values)} min={values[0]:.2f} median={values[len(values) // 2]:.2f} "
            f"max={values[-1]:.2f}"
        )
    chaos_report.figures["crash runs"] = (
        f"{len(kinds)} runs in {wall:.1f} s, {ctx.restarts} server restarts, "
        f"{fake.total_calls()} provider calls for "
        f"{sum(len(db_items) for db_items in map(ctx.db.items, ctx.job_ids))} items, "
        f"statuses {dict(ctx.obs.statuses)}"
    )
    chaos_report.add(
        Row(run="crash-all", fault="tables after all runs", checks=checks.passed, result="ok")
    )
