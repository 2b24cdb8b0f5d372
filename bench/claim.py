"""Claim latency: the claim's compare-and-set against a bare one-row UPDATE.

On PostgreSQL, in this process: a 10-item PENDING job made through the API, then, one
after the other in the app's own units of work, each with its commit, SAMPLES times:

- the claim: ``uow.jobs.claim_job(...)`` (flips the job to GENERATING, opens its run);
- the baseline: ``UPDATE t SET n = n + 1 WHERE id = 1 RETURNING n`` on a one-row table.

Before each of them the same untimed transaction puts the job back to PENDING. The two
alternate (which goes first flips every pair), so the machine's noise hits both alike.
Target: claim / bare, p50 and p99, each <= 1.5. (That exactly one of many simultaneous
claims wins is a test: tests/integration/test_claim.py.)

Usage: python bench/claim.py [--samples 400]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from _common import exit_on_sigterm, figure, percentile, write_results
from _inprocess import InProcess, app_in_process
from sqlalchemy import text

TARGET = 1.5


def timed(unit: InProcess, job_id: int, org: int) -> dict[str, Callable[[], float]]:
    """name: a function that resets the job, then times one transaction of that name."""

    def reset() -> None:
        with unit.services.uow_factory() as uow:
            uow.session.execute(
                text("UPDATE jobs SET status = 'PENDING' WHERE id = :id"), {"id": job_id}
            )
            uow.commit()

    def claim() -> float:
        reset()
        t0 = time.perf_counter()
        with unit.services.uow_factory() as uow:
            attempt = uow.jobs.claim_job(
                job_id, org, regenerate=False, user_id=None, worker_id=None
            )
            uow.commit()
        seconds = time.perf_counter() - t0
        assert attempt is not None
        return seconds

    def bare() -> float:
        reset()
        t0 = time.perf_counter()
        with unit.services.uow_factory() as uow:
            uow.session.execute(text("UPDATE t SET n = n + 1 WHERE id = 1 RETURNING n")).one()
            uow.commit()
        return time.perf_counter() - t0

    return {"claim": claim, "bare": bare}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=400)
    args = parser.parse_args()
    exit_on_sigterm()
    # The provider is never called here.
    with app_in_process("http://127.0.0.1:9/v1") as unit, unit.app.test_client() as client:
        job = unit.call(
            client,
            "POST",
            "/api/jobs",
            {"title": "claimed", "voice": "alloy", "items": [f"item {i}" for i in range(10)]},
            expect=201,
        )
        with unit.services.uow_factory() as uow:
            org = uow.session.execute(
                text("SELECT organization_id FROM jobs WHERE id = :id"), {"id": job["id"]}
            ).scalar_one()
            uow.session.execute(text("CREATE TABLE t (id integer PRIMARY KEY, n integer)"))
            uow.session.execute(text("INSERT INTO t VALUES (1, 0)"))
            uow.commit()
        steps = timed(unit, job["id"], org)
        for _ in range(30):  # warm up the pool, the statement caches and the server's plans
            for step in steps.values():
                step()
        times: dict[str, list[float]] = {"claim": [], "bare": []}
        for i in range(args.samples):
            for name in ("claim", "bare") if i % 2 else ("bare", "claim"):
                times[name].append(steps[name]())
    ms = {f"{name} {p}": percentile(v, p) * 1000 for name, v in times.items() for p in (50, 99)}
    print(", ".join(f"{k} {v:.3f} ms" for k, v in ms.items()))
    figures: dict[str, Any] = {}
    for p in (50, 99):
        ratio = ms[f"claim {p}"] / ms[f"bare {p}"]
        figures[f"p{p}"] = figure(
            f"claim / bare UPDATE, p{p}", ratio, f"<= {TARGET}", ratio <= TARGET
        )
    write_results("claim", {"params": vars(args), "ms": ms, "figures": figures})


if __name__ == "__main__":
    main()
