"""PostgreSQL stopped and started again while a job runs: the app answers meanwhile,
reconnects, and the job completes (at once or after bounded retries) without paying
twice for an item that was DONE.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests.support.server import ApiClient

from .chaos_helpers import MAX_RETRIES, new_tag, unique_texts, with_log
from .chaos_provider import ChaosFakeProvider
from .conftest import Spawn
from .harness import (
    SETTLE_TIMEOUT,
    ChaosReport,
    Checks,
    Database,
    Observer,
    Row,
    chaos_env,
    check_completed_job,
    done_texts,
    ensure_pg_running,
    job_summary,
    local_cluster,
    wait_pg,
)


def test_postgres_restart_mid_job(
    postgresql_to_itself: None,
    chaos_db: tuple[str, str],
    fake: ChaosFakeProvider,
    spawn: Spawn,
    tmp_path: Path,
    chaos_seed: int,
    chaos_report: ChaosReport,
) -> None:
    """Stop PostgreSQL for ~2-4 s while a job runs: the app reconnects, nothing is paid twice."""
    cluster = local_cluster()
    if cluster is None:
        pytest.skip("needs the local PostgreSQL cluster under pg_ctlcluster")
    url, token = chaos_db
    rng = random.Random(chaos_seed + 3)
    storage = tmp_path / "audio"
    env = chaos_env(url, fake.url, storage)
    db = Database(url)
    fake.latency = 0.25
    server = spawn(env, name="pg")
    checks = Checks(f"seed={chaos_seed} pg-restart")
    obs = Observer(ApiClient(server.base_url, token), fake, checks.context)
    texts = unique_texts(rng, new_tag("pg"), 24)
    outage = rng.uniform(0.5, 1.5)
    row = chaos_report.add(
        Row(run="pg-restart", fault=f"PostgreSQL down {outage:.1f}s", moment="done>=3")
    )
    try:
        job_id = int(obs.create_job(texts, title="pg restart")["id"])
        response = obs.generate(job_id)
        checks.check("generate 202", response.status_code == 202, response.text[:300])
        mid = obs.wait(job_id, lambda j: j["progress"]["done"] >= 3, SETTLE_TIMEOUT, "3 DONE")
        done_before = done_texts(mid)
        row.calls_before = fake.calls_for(texts)
        t_down = time.monotonic()
        obs.phase = "outage"
        try:
            stopped = cluster.ctl("stop")
            checks.check("pg_ctlcluster stop", stopped.returncode == 0, stopped.stderr)
            wait_pg(False, 10)
            stop_s = time.monotonic() - t_down
            down_until = time.monotonic() + outage
            while time.monotonic() < down_until:  # what the API answers meanwhile
                obs.read(job_id)
                time.sleep(0.2)
            t_start = time.monotonic()
            started = cluster.ctl("start")
            checks.check("pg_ctlcluster start", started.returncode == 0, started.stderr)
        finally:
            ensure_pg_running(cluster)
        t_up = time.monotonic()
        start_s = t_up - t_start
        reconnect_s = obs.wait_healthy(30)
        obs.phase = "normal"
        row.recovery_s = time.monotonic() - t_down
        outage_statuses = {k: v for k, v in obs.statuses.items() if k.startswith("outage")}

        settled = obs.settled(job_id, 60, "job ended after the restart")
        first_outcome = settled["runs"][0]["outcome"]
        checks.check(
            "job COMPLETED, or FAILED and retryable",
            settled["status"] in ("COMPLETED", "FAILED") and first_outcome != "RUNNING",
            job_summary(settled),
        )
        checks.check("DONE items kept", done_before <= done_texts(settled), job_summary(settled))
        job = settled
        retries = 0
        while job["status"] != "COMPLETED":
            checks.check("retries bounded", retries < MAX_RETRIES, job_summary(job))
            retry = obs.generate(job_id)
            checks.check("retry claimed", retry.status_code == 202, retry.text[:300])
            job = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
            retries += 1
        check_completed_job(checks, obs, db, storage, job, texts, billed_once=done_before)
        row.calls_after = fake.calls_for(texts)
        row.checks = checks.passed
        row.result = "ok"
        row.note = (
            f"stop {stop_s:.1f}s + down {outage:.1f}s + start {start_s:.1f}s; "
            f"app healthz 200 {reconnect_s:.1f}s later; "
            f"first run {first_outcome}; retries={retries}; during outage {outage_statuses}"
        )
        chaos_report.figures["API during the PostgreSQL outage"] = (
            f"{outage_statuses}; 5xx bodies: {obs.server_errors_in('outage')[:2]}"
        )
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, server) from exc
