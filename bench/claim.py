"""Claim benchmark: 50 concurrent clicks on one PENDING job, and claim latency.

1. Contention: 50 threads, each with its own session (and its own pooled connection,
   checked out before the start line), call ``JobsRepository.claim_job`` on the same PENDING
   job at the same instant (a barrier) and commit if they won. Exactly one winner per
   trial; the job is reset to PENDING between trials.
2. Latency: one uncontended claim + commit in a Writer, against a bare single-row
   ``UPDATE t SET n = n + 1 WHERE id = 1 RETURNING n`` + commit in a Writer on the same
   database and engine. Interleaved, so machine noise hits both alike; target p50 and p99
   within 1.5x.

Usage: python bench/claim.py [--trials 200] [--clicks 50] [--samples 400] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
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
from sqlalchemy import text, update

from speechbatch.db import make_engine, make_session_factory
from speechbatch.models import JobStatus
from speechbatch.repositories import JobsRepository
from speechbatch.repositories.tables import jobs
from speechbatch.uow import Writer

LATENCY_TARGET = 1.5


def _setup(session_factory: Any, n_items: int) -> tuple[int, int]:
    with Writer(session_factory) as uow:
        org = uow.users.get_or_create_organization("bench")
        job = uow.jobs.create_job(
            org, None, "claim bench", "alloy", [f"t{i}" for i in range(n_items)]
        )
        uow.session.execute(text("CREATE TABLE t (id integer PRIMARY KEY, n integer NOT NULL)"))
        uow.session.execute(text("INSERT INTO t (id, n) VALUES (1, 0)"))
        uow.commit()
    return org, job


def _reset(session_factory: Any, job_id: int) -> None:
    with Writer(session_factory) as uow:
        uow.session.execute(
            update(jobs).where(jobs.c.id == job_id).values(status=JobStatus.PENDING)
        )
        uow.commit()


def contention(url: str, org: int, job_id: int, trials: int, clicks: int) -> dict[str, Any]:
    """``trials`` rounds of ``clicks`` simultaneous claims; count winners per round."""
    engine = make_engine(url)
    if not url.startswith("sqlite"):  # SQLite's default pool opens a connection per thread
        # One connection per click, so that all of them really run at once.
        engine.dispose()
        from sqlalchemy import create_engine

        from speechbatch.db import PG_SESSION_OPTIONS

        engine = create_engine(
            url, connect_args={"options": PG_SESSION_OPTIONS}, pool_size=clicks + 2, max_overflow=0
        )
    session_factory = make_session_factory(engine)
    sqlite = url.startswith("sqlite")
    start = threading.Barrier(clicks + 1, timeout=60)
    end = threading.Barrier(clicks + 1, timeout=60)
    results: list[list[int | None]] = [[None] * clicks for _ in range(trials)]
    errors: list[str] = []
    stop = threading.Event()

    def click(n: int) -> None:
        for trial in range(trials):
            session = session_factory()
            try:
                if not sqlite:
                    # Check out the connection before the start line. (Not on SQLite:
                    # its BEGIN IMMEDIATE would take the write lock before the barrier.)
                    session.connection()
                start.wait()
                if stop.is_set():
                    return
                attempt = JobsRepository(session).claim_job(
                    job_id, org, regenerate=False, user_id=None, worker_id=None
                )
                if attempt is not None:
                    session.commit()
                results[trial][n] = attempt
            except Exception as exc:  # a click must never error: record it
                errors.append(f"trial {trial} click {n}: {exc!r}")
            finally:
                session.rollback()
                session.close()
            end.wait()

    threads = [threading.Thread(target=click, args=(n,), daemon=True) for n in range(clicks)]
    for t in threads:
        t.start()
    round_ms: list[float] = []
    for _ in range(trials):
        t0 = time.perf_counter()
        start.wait()
        end.wait()
        round_ms.append((time.perf_counter() - t0) * 1000)
        _reset(session_factory, job_id)
    for t in threads:
        t.join()
    winners = [sum(1 for a in r if a is not None) for r in results]
    with Writer(session_factory) as uow:
        attempt: int = uow.session.execute(
            text("SELECT attempt FROM jobs WHERE id = :id"), {"id": job_id}
        ).scalar_one()
        run_rows: int = uow.session.execute(
            text("SELECT count(*) FROM runs WHERE job_id = :id"), {"id": job_id}
        ).scalar_one()
    engine.dispose()
    exact = sum(1 for w in winners if w == 1)
    return {
        "trials": trials,
        "clicks": clicks,
        "trials_with_exactly_one_winner": exact,
        "max_winners_in_a_trial": max(winners),
        "min_winners_in_a_trial": min(winners),
        "final_attempt": int(attempt),
        "run_rows": int(run_rows),
        "errors": errors[:10],
        "error_count": len(errors),
        "round_ms_p50": percentile(round_ms, 50),
        "round_ms_p99": percentile(round_ms, 99),
        "pass": exact == trials and not errors and attempt == trials and run_rows == trials,
    }


def latency(url: str, org: int, job_id: int, samples: int) -> dict[str, Any]:
    """Interleaved single claims and bare single-row updates, each with its commit."""
    engine = make_engine(url)
    session_factory = make_session_factory(engine)
    bare = text("UPDATE t SET n = n + 1 WHERE id = 1 RETURNING n")
    claim_s: list[float] = []
    bare_s: list[float] = []

    def one_claim() -> float:
        _reset(session_factory, job_id)
        with Timer() as t, Writer(session_factory) as uow:
            attempt = uow.jobs.claim_job(
                job_id, org, regenerate=False, user_id=None, worker_id=None
            )
            assert attempt is not None
            uow.commit()
        return t.seconds

    def one_bare() -> float:
        _reset(session_factory, job_id)  # the same untimed transaction before each
        with Timer() as t, Writer(session_factory) as uow:
            uow.session.execute(bare).scalar_one()
            uow.commit()
        return t.seconds

    for _ in range(30):  # warm up: pool, statement caches, server plans
        one_claim()
        one_bare()
    for i in range(samples):
        if i % 2:
            claim_s.append(one_claim())
            bare_s.append(one_bare())
        else:
            bare_s.append(one_bare())
            claim_s.append(one_claim())
    engine.dispose()
    out: dict[str, Any] = {"samples": samples}
    for name, values in (("claim", claim_s), ("bare_update", bare_s)):
        out[f"{name}_ms_p50"] = percentile(values, 50) * 1000
        out[f"{name}_ms_p99"] = percentile(values, 99) * 1000
    out["ratio_p50"] = out["claim_ms_p50"] / out["bare_update_ms_p50"]
    out["ratio_p99"] = out["claim_ms_p99"] / out["bare_update_ms_p99"]
    out["target_ratio"] = LATENCY_TARGET
    out["pass"] = out["ratio_p50"] <= LATENCY_TARGET and out["ratio_p99"] <= LATENCY_TARGET
    return out


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(backend, "claim") as url, tempfile.TemporaryDirectory() as tmp:
        bench_settings(url, tmp)  # the same validation the app applies
        engine = make_engine(url)
        org, job_id = _setup(make_session_factory(engine), args.items)
        engine.dispose()
        trials = args.trials
        cont = contention(url, org, job_id, trials, args.clicks)
        lat = latency(url, org, job_id, args.samples)
    return {"contention": cont, "latency": lat}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--clicks", type=int, default=50)
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--items", type=int, default=10, help="items of the claimed job")
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    backends = ["postgresql"] if args.no_sqlite else ["postgresql", "sqlite"]
    results: dict[str, Any] = {"params": vars(args)}
    for backend in backends:
        t0 = time.perf_counter()
        results[backend] = run_backend(backend, args)
        results[backend]["seconds"] = time.perf_counter() - t0
    rows = []
    for backend in backends:
        c = results[backend]["contention"]
        rows.append(
            [
                backend,
                f"{c['trials_with_exactly_one_winner']}/{c['trials']}",
                f"{c['min_winners_in_a_trial']}..{c['max_winners_in_a_trial']}",
                c["error_count"],
                c["round_ms_p50"],
                verdict(c["pass"]),
            ]
        )
    print_table(
        f"Contention: {args.clicks} concurrent claims of one PENDING job per trial",
        ["backend", "exactly-1-winner", "winners", "errors", "round p50 ms", "verdict"],
        rows,
    )
    rows = []
    for backend in backends:
        lat = results[backend]["latency"]
        rows.append(
            [
                backend,
                lat["claim_ms_p50"],
                lat["bare_update_ms_p50"],
                lat["ratio_p50"],
                lat["claim_ms_p99"],
                lat["bare_update_ms_p99"],
                lat["ratio_p99"],
                verdict(lat["pass"]),
            ]
        )
    print_table(
        f"Latency: claim + commit vs bare single-row UPDATE + commit (target <= {LATENCY_TARGET}x)",
        ["backend", "claim p50", "bare p50", "ratio", "claim p99", "bare p99", "ratio", "verdict"],
        rows,
    )
    write_results("claim", results)


if __name__ == "__main__":
    main()
