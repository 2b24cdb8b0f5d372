"""Provider-bound throughput: jobs sharing the deployment's provider slots, each one watched.

``gunicorn wsgi:app -w 2 --threads 4`` on PostgreSQL with ``PROVIDER_CONCURRENCY=8`` (and
the default ``ITEM_CONCURRENCY=4``: four jobs want 16 calls at once, so the 8 slots are the
bound), a fake provider in a process of its own that answers every call after LATENCY.
Per round, JOBS jobs of ITEMS items each (texts of their own: nothing is reused) are
clicked at once (POST .../generate from one thread each), and each job is watched as the
job page does it, 5 times a second: a conditional read of its summary and of its first
page of items (``If-None-Match`` with the last ETag). Efficiency = ideal / actual, where
ideal = JOBS x ITEMS x LATENCY / 8 (/ the lanes, JOBS x ITEM_CONCURRENCY, if fewer) and
actual runs from the first run's start to the last run's end (the runs' ``started_at``
and ``finished_at``: the database's clock). A warm-up round of 8 items a job comes first
and is not counted (a server opens its pools once).

Figures (medians of the rounds):
  realistic: 4 jobs x 40 items, 2 s calls (ideal 40 s), target >= 0.95
  slow: 4 jobs x 40 items, 0.5 s calls (ideal 10 s), target >= 0.95 (reported beside it)
  fast: 4 jobs x 24 items (96), 0.1 s calls (ideal 1.2 s), reported, no target

Which worker runs a job is the worker that accepted its click (chance): each round
prints how the jobs fell (from gunicorn's access log), e.g. "2+2".

Usage: python bench/throughput.py {realistic,slow,fast} [--rounds N] [--jobs N] [--items N]
       [--latency S] [--poll-hz 5] [--item-concurrency 4]
"""

from __future__ import annotations

import argparse
import collections
import threading
import time
from datetime import datetime
from typing import Any

import requests
from _common import exit_on_sigterm, fake_provider, figure, median, write_results
from _http import Api, Deployment, deployment

SLOTS = 8
FIGURES = {  # name: (jobs, items per job, latency s, rounds, target efficiency)
    "realistic": (4, 40, 2.0, 3, 0.95),
    "slow": (4, 40, 0.5, 3, 0.95),
    "fast": (4, 24, 0.1, 5, 0.85),
}


class Watcher(threading.Thread):
    """Polls one job as its page does, ``hz`` times a second, until it is COMPLETED."""

    def __init__(self, api: Api, job_id: int, hz: float) -> None:
        super().__init__(daemon=True, name=f"watch-{job_id}")
        self.api, self.job_id, self.period = api, job_id, 1 / hz
        self.statuses: collections.Counter[int] = collections.Counter()
        self.completed = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        etags: dict[str, str] = {}
        paths = {
            "summary": f"/api/jobs/{self.job_id}?items=none",
            "items": f"/api/jobs/{self.job_id}/items?offset=0&limit=100",
        }
        next_at = time.monotonic()
        with self.api.session() as session:
            while not self.stop.is_set():
                for name, path in paths.items():
                    headers = {"If-None-Match": etags[name]} if name in etags else {}
                    try:
                        answer = session.get(self.api.base_url + path, headers=headers, timeout=30)
                    except requests.RequestException:
                        self.statuses[0] += 1  # counted as status 0; the watch goes on
                        continue
                    self.statuses[answer.status_code] += 1
                    if answer.status_code == 200:
                        etags[name] = answer.headers.get("ETag", "")
                        if name == "summary" and answer.json()["status"] == "COMPLETED":
                            self.completed.set()
                next_at += self.period
                self.stop.wait(max(0.0, next_at - time.monotonic()))


def ended_run(api: Api, job_id: int) -> dict[str, Any]:
    """The job's last run once its end is written (it may come just after the status)."""
    deadline = time.monotonic() + 30
    while (run := api.call("GET", f"/api/jobs/{job_id}")["runs"][-1])["finished_at"] is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id}: its run has no end 30 s after COMPLETED")
        time.sleep(0.1)
    return dict(run)


def one_round(app: Deployment, label: str, jobs: int, items: int, hz: float) -> dict[str, Any]:
    """Create, click and watch ``jobs`` jobs until all are COMPLETED; their runs' span."""
    ids = [
        app.api.create_job([f"{label} job {j} item {i}" for i in range(items)], f"{label} {j}")
        for j in range(jobs)
    ]
    watchers = [Watcher(app.api, job_id, hz) for job_id in ids]
    for watcher in watchers:
        watcher.start()
    start_line = threading.Barrier(jobs)

    def click(job_id: int) -> None:
        start_line.wait()
        app.api.call("POST", f"/api/jobs/{job_id}/generate", expect=202)

    clickers = [threading.Thread(target=click, args=(job_id,)) for job_id in ids]
    for clicker in clickers:
        clicker.start()
    for clicker in clickers:
        clicker.join()
    for watcher in watchers:
        if not watcher.completed.wait(600):
            raise RuntimeError(f"job {watcher.job_id} did not complete within 600 s")
        watcher.stop.set()
        watcher.join()
    runs = [ended_run(app.api, job_id) for job_id in ids]
    started = min(datetime.fromisoformat(r["started_at"]) for r in runs)
    finished = max(datetime.fromisoformat(r["finished_at"]) for r in runs)
    by_worker = collections.Counter(
        app.server.pids_of("POST", r"/api/jobs/\d+/generate", 202)[-jobs:]
    )
    shares = [*by_worker.values(), *[0] * (app.server.workers - len(by_worker))]
    polls: collections.Counter[int] = collections.Counter()
    for watcher in watchers:
        polls.update(watcher.statuses)
    return {
        "span": (started.timestamp(), finished.timestamp()),
        "seconds": (finished - started).total_seconds(),
        "jobs_per_worker": "+".join(str(n) for n in sorted(shares, reverse=True)),
        "poll_statuses": dict(polls),
    }


def slot_time(span: tuple[float, float], calls: list[tuple[float, float]]) -> dict[str, float]:
    """Where the slots' time of a round went, in slot-seconds: ``calling`` (calls in
    flight), ``head`` (from the first run's start to each slot's first call), ``tail``
    (from each slot's last call to the last run's end), ``between`` (the rest: a slot idle
    from one call's end to the next call's start). The calls are laid on SLOTS lanes
    greedily by start time, as the slots were taken."""
    lanes = [(span[0], span[0])] * SLOTS  # (first start, last end) per lane
    between = 0.0
    for start, end in sorted(calls):
        i = min(range(SLOTS), key=lambda k: lanes[k][1])
        first, last = lanes[i]
        if last == span[0] and first == span[0]:
            lanes[i] = (start, end)
        else:
            between += max(0.0, start - last)
            lanes[i] = (first, end)
    return {
        "calling": round(sum(end - start for start, end in calls), 3),
        "head": round(sum(first - span[0] for first, _ in lanes), 3),
        "between": round(between, 3),
        "tail": round(sum(span[1] - last for _, last in lanes), 3),
    }


def measure(
    params: dict[str, Any], rounds: int, storage: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """A warm-up round, then ``rounds`` rounds; each round's figures and the provider's.

    ``storage``: extra settings (``{"STORAGE_URL": "s3://..."}``); none: the folder."""
    jobs, items, hz = params["jobs"], params["items"], params["poll_hz"]
    results: list[dict[str, Any]] = []
    with (
        fake_provider(params["latency"]) as provider,
        deployment(
            provider.url,
            workers=params["workers"],
            PROVIDER_CONCURRENCY=SLOTS,
            ITEM_CONCURRENCY=params["item_concurrency"],
            **dict[str, Any](storage or {}),
        ) as app,
    ):
        one_round(app, "warm-up", jobs, 8, hz)
        provider.reset()
        for n in range(1, rounds + 1):
            provider.timeline()  # the calls of this round only
            result = one_round(app, f"round {n}", jobs, items, hz)
            result["efficiency"] = params["ideal_seconds"] / result["seconds"]
            result["slot_time"] = slot_time(result.pop("span"), provider.timeline())
            results.append(result)
            print(
                f"round {n}: {result['seconds']:.3f} s, efficiency {result['efficiency']:.3f}, "
                f"jobs per worker {result['jobs_per_worker']}, polls {result['poll_statuses']}, "
                f"slot time {result['slot_time']}",
                flush=True,
            )
        stats = provider.stats()
    if stats["calls"] != rounds * jobs * items or stats["max_in_flight"] > SLOTS:
        raise SystemExit(f"the provider saw {stats}: not {rounds * jobs * items} calls, <= {SLOTS}")
    return results, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figure", choices=FIGURES)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--items", type=int, help="items per job")
    parser.add_argument("--latency", type=float, help="seconds per provider call")
    parser.add_argument("--poll-hz", type=float, default=5.0)
    parser.add_argument("--item-concurrency", type=int, default=4, help="ITEM_CONCURRENCY")
    args = parser.parse_args()
    exit_on_sigterm()
    jobs, items, latency, rounds, target = FIGURES[args.figure]
    jobs, items = args.jobs or jobs, args.items or items
    latency, rounds = args.latency or latency, args.rounds or rounds
    params = {
        "jobs": jobs,
        "items": items,
        "latency": latency,
        "slots": SLOTS,
        "workers": 2,
        "item_concurrency": args.item_concurrency,
        "poll_hz": args.poll_hz,
        "ideal_seconds": jobs * items * latency / min(SLOTS, jobs * args.item_concurrency),
    }
    results, stats = measure(params, rounds)
    print(
        f"{jobs} jobs x {items} items, {latency:g} s a call, {SLOTS} slots, 2 workers, "
        f"polled {args.poll_hz:g}/s: ideal {params['ideal_seconds']:g} s; provider max in "
        f"flight {stats['max_in_flight']}"
    )
    efficiency = median([r["efficiency"] for r in results])
    record = figure(
        f"throughput {args.figure}: efficiency (median of {rounds})",
        efficiency,
        f">= {target}",
        efficiency >= target,
    )
    write_results(
        f"throughput_{args.figure}",
        {"params": params, "rounds": results, "provider": stats, "efficiency": record},
    )


if __name__ == "__main__":
    main()
