"""Where a PostgreSQL batch's time goes: one shared job row, or each item's own chain?

The same 96 calls of 100 ms with 8 in flight, in two shapes, alternating in one process
on one database: **one job** of 96 items run 8 at a time (every start and finish of the
eight threads takes the same job row's lock), and **8 jobs** of 12 items run one at a
time each (no row shared by two threads but the organization's month). During every run
a separate connection samples ``pg_stat_activity`` about once a millisecond and counts
what the run's backends are doing: on average how many are running a statement, waiting
for a row lock, waiting for the WAL fsync, or idle inside a transaction waiting for the
client (Python). Efficiency is each job's run on the database's clock (``finished_at -
started_at``): its items x 100 ms / its concurrency / that time; the median of a shape's
jobs per run. No target: it tells which of the two limits the batch figure.

Usage: python bench/batch_shape.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import collections
import logging
import tempfile
import threading
import time
from datetime import datetime
from typing import Any

import psycopg
from _common import (
    PG_ADMIN_DSN,
    bench_admin,
    bench_settings,
    fake_provider,
    fresh_database,
    median,
    print_table,
    write_results,
)

from speechbatch import create_app, spending
from speechbatch import services as svc
from speechbatch.app import Services

ITEMS, LATENCY, IN_FLIGHT = 96, 0.1, 8
SHAPES = {"1 job x 96, 8 in flight": (1, 8), "8 jobs x 12, 1 in flight each": (8, 1)}


class Sampler(threading.Thread):
    """Counts, per sample, the database's non-idle backends by what they wait for."""

    def __init__(self, database: str) -> None:
        super().__init__(daemon=True, name="sampler")
        self.database = database
        self.stop = threading.Event()
        self.samples = 0
        self.states: collections.Counter[str] = collections.Counter()

    def run(self) -> None:
        query = (
            "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid() AND state <> 'idle'"
        )
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            while not self.stop.is_set():
                for state, wait_type, wait in conn.execute(query, (self.database,)).fetchall():
                    self.states[_what(state, wait_type, wait)] += 1
                self.samples += 1
                time.sleep(0.0005)


def _what(state: str, wait_type: str | None, wait: str | None) -> str:
    if state.startswith("idle in transaction"):
        return "idle in a transaction (waiting for Python)"
    if wait_type == "Lock":
        return "waiting for a row lock"
    if wait in ("WALSync", "WALWrite"):
        return "waiting for the WAL"
    return "running a statement"


def one_run(
    services: Services, user: Any, database: str, jobs: int, concurrency: int, label: str
) -> dict[str, Any]:
    ids = [
        svc.create_job(
            services.uow_factory,
            user,
            "shape",
            "alloy",
            [f"{label} job {j} item {i}" for i in range(ITEMS // jobs)],
            services.limits,
        )
        for j in range(jobs)
    ]
    sampler = Sampler(database)
    sampler.start()
    t0 = time.perf_counter()
    for job_id in ids:
        svc.start_generation(services.uow_factory, services.settings, services.runner, user, job_id)
    while services.runner.live_runs():
        time.sleep(0.001)
    wall = time.perf_counter() - t0
    sampler.stop.set()
    sampler.join()
    # Each job's own run, on the database's clock: the eight claims of the second shape
    # are made one after another, and that is not what is compared.
    efficiencies = []
    for job_id in ids:
        view = svc.get_job(services.uow_factory, services.settings, user, job_id)
        assert view["status"] == "COMPLETED", view["status"]
        run = view["runs"][-1]
        seconds = (
            datetime.fromisoformat(run["finished_at"]) - datetime.fromisoformat(run["started_at"])
        ).total_seconds()
        efficiencies.append(len(view["items"]) * LATENCY / (concurrency * seconds))
    busy = {k: v / max(1, sampler.samples) for k, v in sampler.states.items()}
    return {"wall_seconds": wall, "efficiency": median(efficiencies), "busy": busy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    runs: dict[str, list[dict[str, Any]]] = {shape: [] for shape in SHAPES}
    with fresh_database("postgresql", "shape") as url, tempfile.TemporaryDirectory() as tmp:
        database = url.rsplit("/", 1)[1]
        by_concurrency: dict[int, Services] = {}
        try:
            for _, concurrency in SHAPES.values():
                settings = bench_settings(url, tmp, item_concurrency=concurrency)
                app = create_app(settings, provider=fake_provider(latency=LATENCY))
                by_concurrency[concurrency] = app.extensions["speechbatch"]
            first = next(iter(by_concurrency.values()))
            user = bench_admin(first)
            spending.set_budget(first.uow_factory, "bench", 10**9)
            for services in by_concurrency.values():
                services.runner.worker_id()
            for round_no in range(args.rounds):
                shapes = list(SHAPES.items())
                for shape, (jobs, concurrency) in shapes if round_no % 2 == 0 else shapes[::-1]:
                    services = by_concurrency[concurrency]
                    runs[shape].append(
                        one_run(services, user, database, jobs, concurrency, f"r{round_no}")
                    )
        finally:
            for services in by_concurrency.values():
                services.runner.drain(5.0)
                services.dispose()
    kinds = sorted({k for shape_runs in runs.values() for r in shape_runs for k in r["busy"]})
    rows = []
    for shape, shape_runs in runs.items():
        busy = {k: median([r["busy"].get(k, 0.0) for r in shape_runs]) for k in kinds}
        rows.append(
            [
                shape,
                " ".join(f"{r['efficiency']:.3f}" for r in shape_runs),
                median([r["efficiency"] for r in shape_runs]),
                *(busy[k] for k in kinds),
            ]
        )
    print_table(
        f"Batch shapes: {ITEMS} x {LATENCY * 1000:g} ms, {IN_FLIGHT} in flight, PostgreSQL "
        "(backends: median over runs of the average number in each state)",
        ["shape", "efficiency (runs)", "median", *kinds],
        rows,
    )
    write_results("batch_shape", {"params": vars(args), "runs": runs})


if __name__ == "__main__":
    main()
