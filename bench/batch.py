"""Batch benchmark: a 96-item job at 100 ms provider latency, 8 items at a time.

Through the real path: ``create_app(settings, provider=FakeProvider(latency=0.1))``,
``services.create_job``, then ``services.start_generation`` timed until the run has ended
and the job is COMPLETED. The ideal wall time is items x latency / concurrency
(96 x 0.1 / 8 = 1.2 s); efficiency = ideal / measured, target >= 0.9. Each backend
runs several jobs and reports the median. Each job has texts of its own (identical
texts would reuse audio and send nothing), and the organization has a monthly budget
(``--budget``, 0 for none), so every call is reserved against it before it is sent.

The first job of a process is not one of the timed runs (``--warmup``, reported apart as
"cold"): it opens the pool's connections, and psycopg prepares a statement on a connection
only from its fifth execution on, so it measures the process's start, not a run's cost.
A server pays that once, not per job.

Usage: python bench/batch.py [--items 96] [--latency 0.1] [--concurrency 8] [--repeat 5]
       [--warmup 1] [--budget 1000000000]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from typing import Any

from _common import (
    bench_admin,
    bench_settings,
    fake_provider,
    fresh_database,
    median,
    print_table,
    verdict,
    wait_for_runs,
    write_results,
)

from speechbatch import create_app, spending
from speechbatch import services as svc
from speechbatch.app import Services

TARGET = 0.9


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    ideal = args.items * args.latency / args.concurrency
    walls: list[float] = []
    cold: list[float] = []
    with fresh_database(backend, "batch") as url, tempfile.TemporaryDirectory() as tmp:
        settings = bench_settings(url, tmp, item_concurrency=args.concurrency)
        provider = fake_provider(latency=args.latency)
        app = create_app(settings, provider=provider)
        services: Services = app.extensions["speechbatch"]
        try:
            user = bench_admin(services)
            if args.budget:
                spending.set_budget(services.uow_factory, "bench", args.budget)
            services.runner.worker_id()  # register the worker outside the timed part
            for repeat in range(args.warmup + args.repeat):
                texts = [f"run {repeat} item number {i}" for i in range(args.items)]
                job_id = svc.create_job(
                    services.uow_factory, user, "batch", "alloy", texts, services.limits
                )
                calls_before = provider.total_calls()
                t0 = time.perf_counter()
                svc.start_generation(services.uow_factory, settings, services.runner, user, job_id)
                wait_for_runs(services, timeout=60)
                (cold if repeat < args.warmup else walls).append(time.perf_counter() - t0)
                view = svc.get_job(services.uow_factory, settings, user, job_id)
                assert view["status"] == "COMPLETED", view["status"]
                assert view["progress"]["done"] == args.items
                assert provider.total_calls() - calls_before == args.items
        finally:
            services.runner.drain(5.0)
            services.dispose()
    wall = median(walls)
    return {
        "ideal_seconds": ideal,
        "cold_wall_seconds": cold,
        "wall_seconds": walls,
        "wall_seconds_median": wall,
        "efficiency": ideal / wall,
        "overhead_ms_per_item_per_slot": (wall - ideal) / (args.items / args.concurrency) * 1000,
        "pass": ideal / wall >= TARGET,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=96)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5, help="timed jobs per backend")
    parser.add_argument("--warmup", type=int, default=1, help="untimed jobs first (cold)")
    parser.add_argument("--budget", type=int, default=10**9, help="0: no monthly budget")
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.INFO)  # the runner logs every run; keep the table readable
    backends = ["postgresql"] if args.no_sqlite else ["postgresql", "sqlite"]
    results: dict[str, Any] = {"params": vars(args), "target_efficiency": TARGET}
    for backend in backends:
        results[backend] = run_backend(backend, args)
    print_table(
        f"Batch: {args.items} items x {args.latency * 1000:g} ms, concurrency "
        f"{args.concurrency} (ideal {args.items * args.latency / args.concurrency:g} s, "
        f"target efficiency >= {TARGET})",
        ["backend", "cold (s)", "runs (s)", "median s", "efficiency", "overhead ms/item", ""],
        [
            [
                b,
                " ".join(f"{w:.3f}" for w in results[b]["cold_wall_seconds"]),
                " ".join(f"{w:.3f}" for w in results[b]["wall_seconds"]),
                results[b]["wall_seconds_median"],
                results[b]["efficiency"],
                results[b]["overhead_ms_per_item_per_slot"],
                verdict(results[b]["pass"]),
            ]
            for b in backends
        ],
    )
    write_results("batch", results)


if __name__ == "__main__":
    main()
