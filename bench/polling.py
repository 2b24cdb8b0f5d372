"""Status reads: a poll against /healthz, and polls that do not grow with the job.

``gunicorn wsgi:app -w 1 --threads 4`` on PostgreSQL (one worker: with two, which worker
holds wrk's kept-alive connections is chance, and one run can halve another). Three
COMPLETED jobs of 10, 50 and 5,000 items are made through the API (a fake provider that
answers at once). Then ``wrk -t2 -c8`` runs against each endpoint for DURATION seconds,
ROUNDS times, the order reversed every other round; the medians are compared:

- ``GET /api/jobs/ID`` (the full read) of the 50-item job / ``GET /healthz``, requests per
  second: target >= 0.8;
- the cost of a read (1 / requests per second) of the 5,000-item job / the 10-item job's,
  for the conditional read (``If-None-Match`` with the job's current ETag: a 304) and the
  summary (``?items=none``): target <= 1.2 each.

A Lua script counts wrk's answers by status; an answer other than the expected one fails.

Usage: python bench/polling.py [--rounds 3] [--duration 5] [--connections 8]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

import requests
from _common import exit_on_sigterm, fake_provider, figure, median, write_results
from _http import Deployment, deployment, wrk

SIZES = (10, 50, 5000)


def endpoints(app: Deployment, jobs: dict[int, int]) -> dict[str, tuple[str, list[str], int]]:
    """name: (url, headers, the status every answer must have)."""
    base, auth = app.api.base_url, f"Authorization: Bearer {app.api.token}"
    found = {
        "healthz": (f"{base}/healthz", [], 200),
        "full 50": (f"{base}/api/jobs/{jobs[50]}", [auth], 200),
    }
    for n in (10, 5000):
        url = f"{base}/api/jobs/{jobs[n]}"
        etag = requests.get(url, headers={"Authorization": auth.split(": ")[1]}, timeout=30)
        found[f"304 {n}"] = (url, [auth, f"If-None-Match: {etag.headers['ETag']}"], 304)
        found[f"summary {n}"] = (f"{url}?items=none", [auth], 200)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    exit_on_sigterm()
    if shutil.which("wrk") is None:
        sys.exit("wrk is missing: apt-get install -y wrk")
    with fake_provider(0.0) as provider, deployment(provider.url, workers=1) as app:
        jobs = {}
        for n in SIZES:
            jobs[n] = app.api.create_job(
                [f"sentence {i} of the polled job" for i in range(n)], f"polled {n}"
            )
            app.api.call("POST", f"/api/jobs/{jobs[n]}/generate", expect=202)
            app.api.wait_done(jobs[n], timeout=600)
        found = endpoints(app, jobs)
        for url, headers, _ in found.values():  # warm up every endpoint
            wrk(url, 1, args.connections, headers)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in found}
        for i in range(args.rounds):
            for name in found if i % 2 == 0 else reversed(found):
                url, headers, _ = found[name]
                run = wrk(url, args.duration, args.connections, headers)
                runs[name].append(run)
                print(f"round {i + 1} {name}: {run['rps']:.0f} req/s {run['statuses']}", flush=True)
    unexpected = {
        name: sum(n for code, n in r["statuses"].items() if int(code) != found[name][2])
        for name, rs in runs.items()
        for r in rs
    }
    if any(unexpected.values()):
        raise SystemExit(f"answers with another status than expected: {unexpected}")
    rate = {name: median([r["rps"] for r in rs]) for name, rs in runs.items()}
    print("median req/s: " + ", ".join(f"{name} {r:.0f}" for name, r in rate.items()))
    full = rate["full 50"] / rate["healthz"]
    cost_304 = rate["304 10"] / rate["304 5000"]
    cost_summary = rate["summary 10"] / rate["summary 5000"]
    figures = {
        "full_50_vs_healthz": figure(
            "poll of a 50-item job / healthz", full, ">= 0.8", full >= 0.8
        ),
        "cost_304_5000_vs_10": figure(
            "304 poll cost, 5,000 / 10 items", cost_304, "<= 1.2", cost_304 <= 1.2
        ),
        "cost_summary_5000_vs_10": figure(
            "summary poll cost, 5,000 / 10 items", cost_summary, "<= 1.2", cost_summary <= 1.2
        ),
    }
    write_results(
        "polling", {"params": vars(args), "median_rps": rate, "runs": runs, "figures": figures}
    )


if __name__ == "__main__":
    main()
