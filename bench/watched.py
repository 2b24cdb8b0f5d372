"""Watched-batch benchmark: a run's speed while a script polls the job 50 times a second.

Through the HTTP contract on PostgreSQL: ``gunicorn wsgi:app -w 1 --threads 4`` with
``SPEECHBATCH_ITEM_CONCURRENCY=8`` and a fake provider in a process of its own that answers
every call after 100 ms. A 96-item job is created and generated through the API; its wall
time is the run's ``finished_at - started_at`` (the database's clock), so the client's own
waiting is not in it. The ideal is 96 x 0.1 / 8 = 1.2 s; efficiency = ideal / wall.

Each round runs one job *unwatched* (the only reads are a summary every 0.2 s to see the
end) and one *watched*: a poller thread reads the full job (``GET /api/jobs/ID``, with
items and runs, no ``If-None-Match``) on a 20 ms schedule (50 reads a second) from the
click until the job ends. Rounds alternate the order; medians are reported. A warm-up job
of the same size runs first and is reported apart (cold).
Target: watched efficiency >= 0.9.

Usage: python bench/watched.py [--rounds 3] [--items 96] [--latency 0.1] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from datetime import datetime
from typing import Any

import requests
from _common import median, print_table, verdict, write_results
from _http import App, auth_header, fake_provider_process, gunicorn_app, wait_status

TARGET = 0.9
POLL_HZ = 50


class Poller(threading.Thread):
    """Reads the full job on a fixed schedule of ``hz`` reads a second until stopped."""

    def __init__(self, app: App, job_id: int, hz: float) -> None:
        super().__init__(daemon=True, name="poller")
        self.url = f"{app.base_url}/api/jobs/{job_id}"
        self.headers = auth_header(app.token)
        self.period = 1 / hz
        self.stop = threading.Event()
        self.reads = 0
        self.errors = 0
        self.seconds = 0.0

    def run(self) -> None:
        session = requests.Session()
        start = next_at = time.perf_counter()
        while not self.stop.is_set():
            try:
                r = session.get(self.url, headers=self.headers, timeout=10)
                self.reads += r.status_code == 200
                self.errors += r.status_code != 200
            except requests.RequestException:
                self.errors += 1
            next_at += self.period
            delay = next_at - time.perf_counter()
            if delay > 0:
                self.stop.wait(delay)
        self.seconds = time.perf_counter() - start


def one_job(app: App, texts: list[str], watched: bool) -> dict[str, Any]:
    """Create and generate one job; its run's wall time (database clock) and the poller's."""
    job = app.api.create_job(texts, title="watched" if watched else "unwatched")
    poller = Poller(app, job["id"], POLL_HZ) if watched else None
    if poller:
        poller.start()
    try:
        response = app.api.generate(job["id"])
        assert response.status_code == 202, response.text
        wait_status(app, job["id"], ("COMPLETED", "FAILED"), timeout=120)
    finally:
        if poller:
            poller.stop.set()
            poller.join(15)
    final = app.api.get_job(job["id"])
    assert final["status"] == "COMPLETED", final["status"]
    assert final["progress"]["done"] == len(texts)
    run = final["runs"][-1]
    wall = (
        datetime.fromisoformat(run["finished_at"]) - datetime.fromisoformat(run["started_at"])
    ).total_seconds()
    out: dict[str, Any] = {"wall_seconds": wall}
    if poller:
        out["poll_reads"] = poller.reads
        out["poll_errors"] = poller.errors
        out["poll_rate"] = poller.reads / poller.seconds if poller.seconds else 0.0
    return out


def job_arguments(description: str, rounds: int) -> argparse.ArgumentParser:
    """The options of a watched job's shape (this script's and bench/lanes.py's)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--items", type=int, default=96)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=8)
    return parser


def main() -> None:
    args = job_arguments(__doc__.splitlines()[0], rounds=3).parse_args()
    logging.disable(logging.INFO)
    ideal = args.items * args.latency / args.concurrency
    runs: dict[str, list[dict[str, Any]]] = {"unwatched": [], "watched": []}
    with (
        fake_provider_process(args.latency) as provider,
        gunicorn_app(provider.url, workers=1, threads=4, ITEM_CONCURRENCY=args.concurrency) as app,
    ):
        # A warm-up job of the measured size: a one-item job opened one of the pool's
        # connections, so the first timed job (an unwatched one) paid for the other
        # seven and for their first statements.
        warm = one_job(app, [f"warm up item {n}" for n in range(args.items)], watched=False)
        print(f"warm-up (cold, not counted): {warm['wall_seconds']:.3f} s", flush=True)
        for i in range(args.rounds):
            for name in ("unwatched", "watched") if i % 2 == 0 else ("watched", "unwatched"):
                # Texts of its own per job: identical texts would reuse audio, send nothing.
                texts = [f"{name} round {i} item {n}" for n in range(args.items)]
                r = one_job(app, texts, watched=name == "watched")
                runs[name].append(r)
                extra = f", {r['poll_rate']:.1f} reads/s" if "poll_rate" in r else ""
                print(f"round {i + 1} {name}: {r['wall_seconds']:.3f} s{extra}", flush=True)
    results: dict[str, Any] = {
        "params": vars(args),
        "target_efficiency": TARGET,
        "cold_wall_seconds": warm["wall_seconds"],
        "runs": runs,
    }
    for name, rs in runs.items():
        wall = median([r["wall_seconds"] for r in rs])
        results[name] = {"wall_seconds_median": wall, "efficiency": ideal / wall}
    results["watched"]["poll_rate_median"] = median([r["poll_rate"] for r in runs["watched"]])
    results["watched"]["poll_errors"] = sum(r["poll_errors"] for r in runs["watched"])
    results["pass"] = results["watched"]["efficiency"] >= TARGET
    print_table(
        f"Watched batch: {args.items} items x {args.latency * 1000:g} ms, {args.concurrency} in "
        f"flight, gunicorn -w 1 --threads 4, PostgreSQL (ideal {ideal:g} s, target >= {TARGET})",
        ["case", "runs (s)", "median s", "efficiency", "poll reads/s"],
        [
            [
                name,
                " ".join(f"{r['wall_seconds']:.3f}" for r in runs[name]),
                results[name]["wall_seconds_median"],
                results[name]["efficiency"],
                results[name].get("poll_rate_median", ""),
            ]
            for name in runs
        ],
    )
    efficiency = results["watched"]["efficiency"]
    print(f"\nwatched efficiency {efficiency:.3f}  {verdict(results['pass'])}")
    write_results("watched", results)


if __name__ == "__main__":
    main()
