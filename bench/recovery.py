"""Recovery-check benchmark: a 10-item and a 5,000-item GENERATING job, and the plans.

On PostgreSQL, next to 2,000 COMPLETED jobs of 20 items (so that the planner has real
tables to choose from), two live GENERATING jobs are set up mid-run (half DONE, two
items GENERATING, the rest PENDING; fresh stamps, a heartbeating worker). Two cases:

* live: the job's own stamp is fresh (the common read);
* quiet job row: the job's ``updated_at`` is an hour old while its items are fresh, so
  the check must look at the items (the slow-but-alive case that must never recover).

For each, interleaved: ``services.recover_stale`` for one job id (what every read runs
first) and ``RecoveryRepository.find_stale_jobs`` alone. Target: per-call latency of the
5,000-item job within 1.5x of the 10-item job. Then EXPLAIN (ANALYZE, BUFFERS) of the
exact statements the check sends (captured from the engine), which must show index
scans on jobs and items, no sequential scan.

Usage: python bench/recovery.py [--samples 300] [--background-jobs 2000]
"""

from __future__ import annotations

import argparse
import logging
import re
import tempfile
import time
from typing import Any

from _common import (
    Timer,
    bench_settings,
    fresh_database,
    percentile,
    print_table,
    verdict,
    write_results,
)
from sqlalchemy import event, text

from speechbatch import services as svc
from speechbatch.db import make_engine, make_session_factory
from speechbatch.uow import SessionUowFactory, Writer

TARGET = 1.5
SIZES = (10, 5000)


def _setup(sf: Any, background_jobs: int) -> tuple[int, dict[int, int]]:
    with Writer(sf) as uow:
        org = uow.users.get_or_create_organization("bench")
        worker = uow.workers.register_worker("bench-host", 4242)
        s = uow.session
        # Background: COMPLETED jobs with DONE items and their runs.
        s.execute(
            text(
                "INSERT INTO jobs (organization_id, title, voice, status, attempt, created_at,"
                " updated_at, started_at, finished_at) SELECT :org, 'old ' || g, 'alloy',"
                " 'COMPLETED', 1, now() - interval '2 days', now() - interval '2 days',"
                " now() - interval '2 days', now() - interval '2 days'"
                " FROM generate_series(1, :n) g"
            ),
            {"org": org, "n": background_jobs},
        )
        s.execute(
            text(
                "INSERT INTO items (job_id, position, text, status, audio_path, updated_at)"
                " SELECT j.id, p, 'text ' || p, 'DONE', 'jobs/' || j.id || '/' || p || '.mp3',"
                " now() - interval '2 days' FROM jobs j, generate_series(1, 20) p"
            )
        )
        s.execute(
            text(
                "INSERT INTO runs (job_id, attempt, kind, worker_id, outcome, started_at,"
                " finished_at) SELECT id, 1, 'generate', :w, 'COMPLETED', started_at, finished_at"
                " FROM jobs"
            ),
            {"w": worker},
        )
        jobs_by_size = {}
        for n in SIZES:
            job = uow.jobs.create_job(org, None, f"live {n}", "alloy", [f"t{i}" for i in range(n)])
            attempt = uow.jobs.claim_job(job, org, regenerate=False, user_id=None, worker_id=worker)
            assert attempt == 1
            # Mid-run: the first half DONE, the next two GENERATING, the rest PENDING.
            s.execute(
                text(
                    "UPDATE items SET status = CASE WHEN position <= :half THEN 'DONE'"
                    " WHEN position <= :half + 2 THEN 'GENERATING' ELSE 'PENDING' END,"
                    " updated_at = clock_timestamp() WHERE job_id = :j"
                ),
                {"half": n // 2, "j": job},
            )
            jobs_by_size[n] = job
        uow.commit()
    with sf() as s, s.connection() as c:
        c.commit()
        c.exec_driver_sql("COMMIT")  # leave the implicit transaction for VACUUM
    return org, jobs_by_size


def _analyze(url: str) -> None:
    import psycopg

    plain = url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def _quiet_job_rows(sf: Any, job_ids: list[int], quiet: bool) -> None:
    with Writer(sf) as uow:
        stamp = "now() - interval '1 hour'" if quiet else "clock_timestamp()"
        uow.session.execute(
            text(f"UPDATE jobs SET updated_at = {stamp} WHERE id = ANY(:ids)"), {"ids": job_ids}
        )
        # Keep the items fresh: the job is slow but alive and must not be recovered.
        uow.session.execute(
            text(
                "UPDATE items SET updated_at = clock_timestamp()"
                " WHERE job_id = ANY(:ids) AND status = 'GENERATING'"
            ),
            {"ids": job_ids},
        )
        uow.commit()


def measure(sf: Any, settings: Any, org: int, jobs: dict[int, int], samples: int) -> dict[str, Any]:
    uow_factory = SessionUowFactory(sf)
    times: dict[str, list[float]] = {f"{k}_{n}": [] for k in ("recover", "find") for n in SIZES}

    def recover(n: int) -> float:
        with Timer() as t:
            got = svc.recover_stale(uow_factory, settings, organization_id=org, job_id=jobs[n])
        assert got == 0, "a live job was recovered"
        return t.seconds

    def find(n: int) -> float:
        with Timer() as t, Writer(sf) as uow:
            stale = uow.recovery.find_stale_jobs(
                lease_seconds=settings.lease_seconds,
                worker_dead_seconds=settings.worker_dead_seconds,
                organization_id=org,
                job_id=jobs[n],
            )
        assert stale == []
        return t.seconds

    for _ in range(20):
        for n in SIZES:
            recover(n)
            find(n)
    order = list(SIZES)
    for i in range(samples):
        for n in order if i % 2 else reversed(order):
            times[f"recover_{n}"].append(recover(n))
            times[f"find_{n}"].append(find(n))
    out: dict[str, Any] = {}
    for key, values in times.items():
        out[f"{key}_ms_p50"] = percentile(values, 50) * 1000
        out[f"{key}_ms_p99"] = percentile(values, 99) * 1000
    small, large = SIZES
    for k in ("recover", "find"):
        out[f"{k}_ratio_p50"] = out[f"{k}_{large}_ms_p50"] / out[f"{k}_{small}_ms_p50"]
        out[f"{k}_ratio_p99"] = out[f"{k}_{large}_ms_p99"] / out[f"{k}_{small}_ms_p99"]
    out["pass"] = all(out[f"{k}_ratio_p50"] <= TARGET for k in ("recover", "find"))
    return out


def explain(engine: Any, sf: Any, settings: Any, org: int, job_id: int | None) -> dict[str, Any]:
    """Capture the statements of one recovery check and EXPLAIN (ANALYZE) each."""
    captured: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        captured.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", grab)
    try:
        with Writer(sf) as uow:
            uow.recovery.find_stale_jobs(
                lease_seconds=settings.lease_seconds,
                worker_dead_seconds=settings.worker_dead_seconds,
                organization_id=org,
                job_id=job_id,
            )
            uow.recovery.find_orphan_item_jobs(organization_id=org, job_id=job_id)
    finally:
        event.remove(engine, "before_cursor_execute", grab)
    plans = []
    with engine.connect() as conn:
        for statement, params in captured:
            rows = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, params).all()
            plan = "\n".join(r[0] for r in rows)
            seq = re.findall(r"Seq Scan on (\w+)", plan)
            plans.append(
                {
                    "statement": statement,
                    "parameters": params,
                    "plan": plan,
                    "seq_scans": seq,
                    "index_scans": sorted(
                        set(re.findall(r"Index (?:Only )?Scan using (\w+)", plan))
                    ),
                }
            )
    return {
        "plans": plans,
        "pass": all(not set(p["seq_scans"]) & {"jobs", "items"} for p in plans),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--background-jobs", type=int, default=2000)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    results: dict[str, Any] = {"params": vars(args), "target_ratio": TARGET}
    t0 = time.perf_counter()
    with fresh_database("postgresql", "recovery") as url, tempfile.TemporaryDirectory() as tmp:
        settings = bench_settings(url, tmp)
        engine = make_engine(url)
        sf = make_session_factory(engine)
        org, jobs = _setup(sf, args.background_jobs)
        _analyze(url)
        for case, quiet in (("live", False), ("quiet_job_row", True)):
            _quiet_job_rows(sf, list(jobs.values()), quiet)
            results[case] = measure(sf, settings, org, jobs, args.samples)
            results[case]["explain_one_job"] = explain(engine, sf, settings, org, jobs[5000])
        results["explain_org_sweep"] = explain(engine, sf, settings, org, None)
        engine.dispose()
    results["seconds"] = time.perf_counter() - t0
    small, large = SIZES
    rows = []
    for case in ("live", "quiet_job_row"):
        r = results[case]
        for k, label in (("recover", "services.recover_stale"), ("find", "find_stale_jobs")):
            rows.append(
                [
                    case,
                    label,
                    r[f"{k}_{small}_ms_p50"],
                    r[f"{k}_{large}_ms_p50"],
                    r[f"{k}_ratio_p50"],
                    r[f"{k}_{small}_ms_p99"],
                    r[f"{k}_{large}_ms_p99"],
                    r[f"{k}_ratio_p99"],
                    verdict(r[f"{k}_ratio_p50"] <= TARGET),
                ]
            )
    print_table(
        f"Recovery check per call, ms ({small} vs {large} items; target ratio <= {TARGET})",
        ["case", "call", "p50 10", "p50 5000", "ratio", "p99 10", "p99 5000", "ratio", "verdict"],
        rows,
    )
    for label, ex in (
        ("one job, live", results["live"]["explain_one_job"]),
        ("one job, quiet job row", results["quiet_job_row"]["explain_one_job"]),
        ("organization sweep (list page)", results["explain_org_sweep"]),
    ):
        for p in ex["plans"]:
            kind = "find_stale_jobs" if "reason" in p["statement"] else "find_orphan_item_jobs"
            print(f"\nEXPLAIN (ANALYZE, BUFFERS) {kind}, {label}:")
            print(p["plan"])
            print(f"  -> index scans: {', '.join(p['index_scans']) or 'none'};"
                  f" seq scans: {', '.join(p['seq_scans']) or 'none'}")  # fmt: skip
        print(f"  verdict ({label}): {verdict(ex['pass'])}")
    write_results("recovery", results)


if __name__ == "__main__":
    main()
