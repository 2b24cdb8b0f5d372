"""Polling benchmark: status reads through gunicorn (one worker, 4 threads) on PostgreSQL.

Three COMPLETED jobs (10, 50 and 5,000 items) are made and run through the JSON API (a
fake provider process answers at once). Then ``wrk`` runs against, in alternating order:
``/healthz``; the full read of the 50-item job; and, for the 10- and the 5,000-item job,
the full read, the summary (``?items=none``) and the conditional read (``If-None-Match``
with the job's current ETag, which should answer 304). A Lua script counts the answers by
status code. Medians of the rounds are compared inside this one run:

- full read of the 50-item job / healthz, in requests per second: target >= 0.8;
- per-read cost of the 5,000-item job / the 10-item job, for the 304 and the summary:
  target <= 1.2 (the full read is reported, without a target).

Usage: python bench/polling.py [--rounds 3] [--duration 5] [--connections 8]
Needs wrk (apt-get install -y wrk).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from typing import Any

from _common import median, print_table, verdict, write_results
from _http import (
    App,
    etag_of,
    fake_provider_process,
    gunicorn_app,
    response_bytes,
    run_job,
    wrk,
)

HEALTHZ_TARGET = 0.8
FLAT_TARGET = 1.2
SIZES = (10, 50, 5000)


def targets(app: App, job_ids: dict[int, int]) -> dict[str, tuple[str, list[str], int]]:
    """name -> (url, headers, expected status)."""
    auth = f"Authorization: Bearer {app.token}"
    found: dict[str, tuple[str, list[str], int]] = {
        "healthz": (f"{app.base_url}/healthz", [], 200),
        "full 50": (f"{app.base_url}/api/jobs/{job_ids[50]}", [auth], 200),
    }
    for n in (10, 5000):
        path = f"/api/jobs/{job_ids[n]}"
        found[f"full {n}"] = (app.base_url + path, [auth], 200)
        found[f"summary {n}"] = (f"{app.base_url}{path}?items=none", [auth], 200)
        etag = etag_of(app, path)
        # Without an ETag (code before conditional reads) the header matches nothing: a 200.
        match = etag or '"none"'
        found[f"304 {n}"] = (app.base_url + path, [auth, f"If-None-Match: {match}"],
                             304 if etag else 200)  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is missing: apt-get install -y wrk")
    logging.disable(logging.INFO)
    results: dict[str, Any] = {
        "params": vars(args),
        "targets": {"full50_vs_healthz": HEALTHZ_TARGET, "5000_vs_10_cost": FLAT_TARGET},
    }
    runs: dict[str, list[dict[str, Any]]] = {}
    with (
        fake_provider_process(0.0) as provider,
        gunicorn_app(provider.url, workers=1, threads=4, ITEM_CONCURRENCY=8) as app,
    ):
        job_ids = {
            n: run_job(app, [f"sentence number {i} of the polled job" for i in range(n)])
            for n in SIZES
        }
        found = targets(app, job_ids)
        results["response_bytes"] = {
            name: response_bytes(app, url.removeprefix(app.base_url))
            for name, (url, _, _) in found.items()
            if name.startswith(("full", "summary"))
        }
        # What the job page reads per poll of a 5,000-item job: its summary and one page
        # of 100 items (absent before GET /api/jobs/ID/items existed).
        page = app.api.request("GET", f"/api/jobs/{job_ids[5000]}/items?offset=0&limit=100")
        if page.status_code == 200:
            results["response_bytes"]["items page of 100, 5000"] = len(page.content)
        results["expected_status"] = {name: t[2] for name, t in found.items()}
        for url, headers, _ in found.values():  # warm up every endpoint
            wrk(url, 1, args.connections, headers)
        names = list(found)
        runs = {name: [] for name in names}
        for i in range(args.rounds):
            for name in names if i % 2 == 0 else reversed(names):
                url, headers, _ = found[name]
                r = wrk(url, args.duration, args.connections, headers)
                runs[name].append(r)
                print(
                    f"round {i + 1} {name}: {r['requests_per_second']:.0f} req/s {r['statuses']}",
                    flush=True,
                )
    results["runs"] = runs
    med = {k: median([r["requests_per_second"] for r in v]) for k, v in runs.items()}
    unexpected = {
        name: sum(n for code, n in r["statuses"].items() if int(code) != found[name][2])
        for name, rs in runs.items()
        for r in rs
    }
    results["median_requests_per_second"] = med
    ratios = {
        "full50_vs_healthz": med["full 50"] / med["healthz"],
        # Cost per read is 1 / rate: the 5,000-item read costs rate(10) / rate(5000) times more.
        "cost_304_5000_vs_10": med["304 10"] / med["304 5000"],
        "cost_summary_5000_vs_10": med["summary 10"] / med["summary 5000"],
        "cost_full_5000_vs_10": med["full 10"] / med["full 5000"],
    }
    results["ratios"] = ratios
    results["unexpected_statuses"] = unexpected
    results["pass"] = {
        "full50_vs_healthz": ratios["full50_vs_healthz"] >= HEALTHZ_TARGET,
        "304_flat": ratios["cost_304_5000_vs_10"] <= FLAT_TARGET and found["304 5000"][2] == 304,
        "summary_flat": ratios["cost_summary_5000_vs_10"] <= FLAT_TARGET,
        "statuses_as_expected": not any(unexpected.values()),
    }
    print_table(
        f"Polling: wrk -t2 -c{args.connections} -d{args.duration:g}s against gunicorn -w 1 "
        f"--threads 4 on PostgreSQL ({args.rounds} alternating runs each)",
        ["endpoint", "runs req/s", "median req/s", "p50 latency (runs)", "statuses", "bytes"],
        [
            [
                name,
                " ".join(f"{r['requests_per_second']:.0f}" for r in runs[name]),
                med[name],
                " ".join(str(r["latency_p50"]) for r in runs[name]),
                " ".join(f"{c}={n}" for c, n in sorted(runs[name][-1]["statuses"].items())),
                results["response_bytes"].get(name, ""),
            ]
            for name in runs
        ],
    )
    p = results["pass"]
    print(
        f"\nfull 50 / healthz = {ratios['full50_vs_healthz']:.3f} (target >= {HEALTHZ_TARGET})  "
        f"{verdict(p['full50_vs_healthz'])}"
    )
    for key, label in (("304", "304_flat"), ("summary", "summary_flat")):
        ratio = ratios[f"cost_{key}_5000_vs_10"]
        print(
            f"{key} read cost 5000 / 10 items = {ratio:.3f} (target <= {FLAT_TARGET})  "
            f"{verdict(p[label])}"
        )
    print(f"full read cost 5000 / 10 items = {ratios['cost_full_5000_vs_10']:.3f} (no target)")
    write_results("polling", results)


if __name__ == "__main__":
    main()
