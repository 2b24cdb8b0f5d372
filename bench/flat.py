"""Flat reads, in process: does a read of a 5,000-item job cost what a 10-item job's does?

The low-noise companion of bench/polling.py (whose wrk runs through gunicorn swing by
20-30% on a shared machine): the app in this process on PostgreSQL, the Flask test client,
and many samples interleaved read by read, so that machine noise hits every case alike.
Two COMPLETED jobs (10 and 5,000 items, run with the FakeProvider); for each, the summary
(``?items=none``), the conditional full read with its current ETag (a 304), and the first
page of 100 items, all with a bearer token. Target: 5,000 / 10 items <= 1.2 for the summary
and the 304 (p50 of the per-read times); the items page is reported.

Usage: python bench/flat.py [--samples 600]
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
    percentile,
    print_table,
    verdict,
    wait_for_runs,
    write_results,
)

from speechbatch import create_app
from speechbatch import services as svc
from speechbatch.app import Services

TARGET = 1.2
SIZES = (10, 5000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=600)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    times: dict[str, list[float]] = {}
    statuses: dict[str, set[int]] = {}
    with fresh_database("postgresql", "flat") as url, tempfile.TemporaryDirectory() as tmp:
        settings = bench_settings(url, tmp, item_concurrency=8)
        app = create_app(settings, provider=fake_provider())
        services: Services = app.extensions["speechbatch"]
        try:
            user = bench_admin(services)
            token = svc.create_token(services.uow_factory, "bench@bench.test")
            client = app.test_client()
            auth = {"Authorization": f"Bearer {token}"}
            cases: dict[str, tuple[str, dict[str, str]]] = {}
            for n in SIZES:
                texts = [f"sentence number {i} of the job" for i in range(n)]
                job_id = svc.create_job(
                    services.uow_factory, user, "flat", "alloy", texts, services.limits
                )
                svc.start_generation(services.uow_factory, settings, services.runner, user, job_id)
                wait_for_runs(services, timeout=300)
                full = client.get(f"/api/jobs/{job_id}", headers=auth)
                assert full.json is not None and full.json["status"] == "COMPLETED"
                etag = {"If-None-Match": full.headers["ETag"]}
                cases[f"summary {n}"] = (f"/api/jobs/{job_id}?items=none", auth)
                cases[f"304 {n}"] = (f"/api/jobs/{job_id}", {**auth, **etag})
                cases[f"items page {n}"] = (f"/api/jobs/{job_id}/items?limit=100", auth)
            times = {name: [] for name in cases}
            statuses = {name: set() for name in cases}
            for i in range(30 + args.samples):
                for name, (path, headers) in cases.items():
                    start = time.perf_counter()
                    status = client.get(path, headers=headers).status_code
                    if i >= 30:  # the first rounds warm up
                        times[name].append(time.perf_counter() - start)
                        statuses[name].add(status)
        finally:
            services.runner.drain(5.0)
            services.dispose()
    p50 = {name: median(t) * 1000 for name, t in times.items()}
    p99 = {name: percentile(t, 99) * 1000 for name, t in times.items()}
    ratios = {kind: p50[f"{kind} 5000"] / p50[f"{kind} 10"] for kind in ("summary", "304")}
    ratios["items page"] = p50["items page 5000"] / p50["items page 10"]
    results: dict[str, Any] = {
        "params": vars(args),
        "target_ratio": TARGET,
        "p50_ms": p50,
        "p99_ms": p99,
        "statuses": {k: sorted(v) for k, v in statuses.items()},
        "ratios_5000_vs_10": ratios,
        "pass": {
            "summary": ratios["summary"] <= TARGET and statuses["summary 5000"] == {200},
            "304": ratios["304"] <= TARGET and statuses["304 5000"] == {304},
        },
    }
    print_table(
        f"Reads in process (Flask test client, PostgreSQL), {args.samples} interleaved samples",
        ["read", "p50 ms", "p99 ms", "statuses"],
        [[k, p50[k], p99[k], " ".join(map(str, sorted(statuses[k])))] for k in times],
    )
    for kind in ("summary", "304"):
        ok = results["pass"][kind]
        print(f"{kind}: 5000 / 10 items = {ratios[kind]:.3f} (target <= {TARGET})  {verdict(ok)}")
    print(f"items page of 100: 5000 / 10 items = {ratios['items page']:.3f} (no target)")
    write_results("flat", results)


if __name__ == "__main__":
    main()
