"""Click benchmark: how long Generate takes to answer, for a 10- and a 5,000-item job.

Through the service the API calls (``services.start_generation``: the recovery check,
the budget's hint, the claim and the answer's JSON, until it returns), with a monthly
budget set so that the hint runs. Each click's run is cancelled at once and waited for
(the fake provider takes ``--latency`` per call, so the run sends a few items at most).
Sizes alternate; the medians are compared inside the run. No target: issue 8 asks that
reads not grow with the job, and this shows what of a click still does (the answer is
the whole job, as the contract says).

Usage: python bench/generate.py [--repeat 7] [--latency 0.5] [--no-sqlite]
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
    wait_for_runs,
    write_results,
)

from speechbatch import create_app, spending
from speechbatch import services as svc
from speechbatch.app import Services

SIZES = (10, 5000)


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    clicks: dict[int, list[float]] = {n: [] for n in SIZES}
    with fresh_database(backend, "click") as url, tempfile.TemporaryDirectory() as tmp:
        settings = bench_settings(url, tmp, item_concurrency=8)
        app = create_app(settings, provider=fake_provider(latency=args.latency))
        services: Services = app.extensions["speechbatch"]
        try:
            user = bench_admin(services)
            spending.set_budget(services.uow_factory, "bench", 10**9)
            services.runner.worker_id()
            for repeat in range(args.repeat):
                for n in SIZES:
                    texts = [f"click {repeat} item number {i}" for i in range(n)]
                    job_id = svc.create_job(
                        services.uow_factory, user, "click", "alloy", texts, services.limits
                    )
                    t0 = time.perf_counter()
                    svc.start_generation(
                        services.uow_factory, settings, services.runner, user, job_id
                    )
                    clicks[n].append(time.perf_counter() - t0)
                    spending.cancel_generation(services.uow_factory, services.runner, user, job_id)
                    wait_for_runs(services, 30)
        finally:
            services.runner.drain(5.0)
            services.dispose()
    medians = {n: median(v) for n, v in clicks.items()}
    return {
        "click_ms": {str(n): [t * 1000 for t in v] for n, v in clicks.items()},
        "median_ms": {str(n): t * 1000 for n, t in medians.items()},
        "ratio_5000_to_10": medians[5000] / medians[10],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # every cancel logs a warning
    backends = ["postgresql"] if args.no_sqlite else ["postgresql", "sqlite"]
    results: dict[str, Any] = {"params": vars(args)}
    for backend in backends:
        results[backend] = run_backend(backend, args)
    print_table(
        f"Click (Generate until it answers), budget set, median of {args.repeat}",
        ["backend", "10 items ms", "5,000 items ms", "ratio"],
        [
            [
                b,
                results[b]["median_ms"]["10"],
                results[b]["median_ms"]["5000"],
                results[b]["ratio_5000_to_10"],
            ]
            for b in backends
        ],
    )
    write_results("generate", results)


if __name__ == "__main__":
    main()
