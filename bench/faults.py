"""Faults injected on purpose (issue 41): the figures of the fault suite's promises, and a
long soak of its seeded schedules.

A real gunicorn (2 workers x 2 threads) on a fresh PostgreSQL database behind the fault
proxy (``tests/support/pg_proxy.py``), the chaos provider (``tests/chaos/chaos_provider.py``)
answering short MP3 tones:

- ``outage``: a 40-item run; after 5 items the database refuses everything for
  ``--outage`` seconds (longer than ``--db-retry``); figure: seconds from its return until
  the job has left GENERATING and Retry (or Generate) is accepted. Target <=
  ``--worker-dead`` + 10.
- ``acks``: runs, cancels, regenerates, renders and exports, each with 1-5 lost COMMIT
  acknowledgements at a random moment, healed by Retry, until ``--acks`` were lost;
  figure: DONE items, kept takes, COMPLETED renders and exports without their object.
  Target 0.
- ``storm``: 3 jobs x 12 items at once while every call answers 429 with Retry-After equal
  to the call timeout for ``--storm`` seconds; figure: peak calls in flight at the provider
  / PROVIDER_CONCURRENCY. Target <= 1.
- ``soak``: the fault suite's schedules for ``--seeds`` seeds from ``--first-seed``
  (``FAULT_SEEDS``), through pytest; figure: seeds that failed. Target 0.

Usage: python bench/faults.py [--figures outage acks storm soak] [--outage 90]
       [--db-retry 60] [--worker-dead 10] [--acks 1000] [--storm 10] [--seeds 20] [--first-seed 1]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import ROOT, exit_on_sigterm, figure, write_results

sys.path.insert(0, str(ROOT))
# (after the root is on the path)
from tests.chaos.chaos_provider import ChaosFakeProvider
from tests.chaos.fault_checks import FaultDatabase
from tests.chaos.fault_stack import FaultStack, fault_env, unique_texts
from tests.support.pg_proxy import PgProxy
from tests.support.server import (
    ApiClient,
    GunicornServer,
    bootstrap,
    drop_pg_database,
    make_pg_database,
)
from tests.support.webhook_receiver import Receiver


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures", nargs="+", default=["outage", "acks", "storm"])
    parser.add_argument("--outage", type=float, default=90.0)
    parser.add_argument("--db-retry", type=float, default=60.0)
    parser.add_argument("--worker-dead", type=float, default=10.0)
    parser.add_argument("--acks", type=int, default=1000)
    parser.add_argument("--storm", type=float, default=10.0)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=1)
    return parser.parse_args()


@contextmanager
def stack(folder: Path, **env: str) -> Iterator[FaultStack]:
    """A fresh database, proxy, provider, receiver and server; all gone afterwards."""
    url = make_pg_database("sb_bench_faults")
    proxy = PgProxy().start()
    fake = ChaosFakeProvider(latency=0.2, api_key="test-key", real_audio=True).start()
    receiver = Receiver()
    server = None
    try:
        base = fault_env(proxy.url(url), fake.url, folder / "audio")
        token = bootstrap(fault_env(url, fake.url, folder / "audio"))
        base.update({f"SPEECHBATCH_{k}": v for k, v in env.items()})
        server = GunicornServer(base, folder, workers=2, threads=2, name="faults").start()
        made = FaultStack(
            url, proxy, fake, server, folder / "audio", ApiClient(server.base_url, token), receiver
        )
        made.subscribe()
        yield made
    finally:
        if server is not None:
            server.stop(graceful=False)
        receiver.stop()
        fake.stop()
        proxy.stop()
        drop_pg_database(url)


def new_job(s: FaultStack, tag: str, items: int) -> int:
    texts = unique_texts(tag, items)
    job = s.must("POST", "/api/jobs", {"title": tag, "voice": "alloy", "items": texts})
    s.jobs[int(job["id"])] = texts
    return int(job["id"])


def wait_status(s: FaultStack, job_id: int, done: Any, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = s.must("GET", f"/api/jobs/{job_id}")
        if done(job) or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def heal(s: FaultStack, job_id: int) -> None:
    """Retry until COMPLETED (each Retry once the job has left GENERATING)."""
    for _ in range(10):
        job = wait_status(s, job_id, lambda j: j["status"] != "GENERATING", 120)
        if job["status"] == "COMPLETED":
            return
        s.request("POST", f"/api/jobs/{job_id}/generate")
    raise AssertionError(f"job {job_id} not COMPLETED after 10 retries")


def measure_outage(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {"DB_RETRY_SECONDS": f"{args.db_retry:g}", "WORKER_DEAD_SECONDS": f"{args.worker_dead:g}",
           "LEASE_SECONDS": "1800"}  # fmt: skip
    with stack(folder, **env) as s:
        job_id = new_job(s, "outage", 40)
        s.must("POST", f"/api/jobs/{job_id}/generate")
        wait_status(s, job_id, lambda j: j["progress"]["done"] >= 5, 60)
        s.proxy.black_hole(args.outage, refuse=True)
        back = s.proxy.wait_until_back(args.outage + 30)
        while True:
            response = s.request("POST", f"/api/jobs/{job_id}/generate")
            code = None if response is None else response.status_code
            body = {} if response is None or code == 202 else response.json()
            if code == 202 or (code == 409 and body.get("error") == "nothing_to_generate"):
                break
            if time.monotonic() - back > 600:
                raise AssertionError(
                    f"Retry not accepted 600 s after the database returned: {code}"
                )
            time.sleep(0.2)
        seconds = time.monotonic() - back
        heal(s, job_id)
    limit = args.worker_dead + 10
    print(f"outage {args.outage:g} s: Retry accepted {seconds:.1f} s after the database returned")
    return figure("seconds from the database's return until Retry works", seconds,
                  f"<= {limit:g}", seconds <= limit)  # fmt: skip


def measure_acks(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(41)
    with stack(folder) as s:
        rounds = 0
        while s.proxy.stats.acks_dropped < args.acks:
            rounds += 1
            kind = rng.choice(["run", "run", "cancel", "regenerate", "render", "export"])
            if kind in ("regenerate", "render") and not s.completed:
                kind = "run"
            job_id = (
                s.completed[-1] if kind in ("regenerate", "render") else new_job(s, f"a{rounds}", 5)
            )
            path = {"run": "generate", "cancel": "generate", "regenerate": "regenerate"}.get(kind)
            s.proxy.drop_after_commit(rng.randint(1, 5))
            if kind == "export":
                s.exports.append(int(s.must("POST", "/api/exports")["id"]))
            elif kind == "render":
                render = s.must("POST", f"/api/jobs/{job_id}/renders", {"format": "mp3"})
                s.renders.append((job_id, int(render["id"])))
            else:
                s.must("POST", f"/api/jobs/{job_id}/{path}")
            time.sleep(rng.uniform(0, 0.5))
            if kind == "cancel":
                s.request("POST", f"/api/jobs/{job_id}/cancel")
            time.sleep(1.0)
            s.proxy.drop_after_commit(-s.proxy.drops_left())
            if kind not in ("render", "export"):
                heal(s, job_id)
                if job_id not in s.completed:
                    s.completed.append(job_id)
            if rounds % 20 == 0:
                print(f"round {rounds}: {s.proxy.stats.acks_dropped} acknowledgements lost")
        time.sleep(3)  # the last renders and exports end
        objects = FaultDatabase(s.url).objects(s)
        lost = [o for o in objects if o[2] is not None and not (s.storage / o[2]).is_file()]
        print(f"{s.proxy.stats.acks_dropped} acknowledgements lost over {rounds} rounds; "
              f"{len(objects)} objects checked, {len(lost)} missing: {lost[:5]}")  # fmt: skip
    return figure(f"objects lost over {args.acks} lost acknowledgements", len(lost), "0", not lost)


def measure_storm(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    concurrency = 4
    with stack(folder, PROVIDER_CONCURRENCY=str(concurrency), ITEM_CONCURRENCY="4") as s:
        jobs = [new_job(s, f"storm{n}", 12) for n in range(3)]
        s.fake.storm(args.storm, retry_after=2.0)  # the call timeout of the stack
        for job_id in jobs:
            s.must("POST", f"/api/jobs/{job_id}/generate")
        time.sleep(args.storm)
        for job_id in jobs:
            heal(s, job_id)
        peak = s.fake.max_in_flight()
    print(f"429 storm of {args.storm:g} s: peak {peak} calls in flight, limit {concurrency}")
    return figure("peak calls in flight under a 429 storm / limit", peak / concurrency,
                  "<= 1", peak <= concurrency)  # fmt: skip


def run_soak(args: argparse.Namespace) -> dict[str, Any]:
    failed = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        env = {**os.environ, "FAULT_SEEDS": str(seed)}
        command = [str(ROOT / ".venv/bin/pytest"), "-q", "-n", "0", "-p", "no:randomly",
                   "tests/chaos/test_faults.py"]  # fmt: skip
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        print(f"seed {seed}: {'ok' if result.returncode == 0 else 'FAILED'}", flush=True)
        if result.returncode != 0:
            failed.append(seed)
            print(failure(result.stdout))
    return figure(f"seeds failed of {args.seeds}", len(failed), "0", not failed)


def failure(output: str) -> str:
    """What failed: the step's assertion and the schedule (up to the server's log), else
    the output's end (the summary table alone does not say which check failed)."""
    start = output.find("AssertionError: step")
    if start < 0:
        start = output.find("AssertionError")
    if start < 0:
        return output[-3000:]
    end = output.find("--- log ---", start)
    return output[start : end if end > 0 else start + 3000] + "\n" + output[-1200:]


def main() -> None:
    args = parse_args()
    exit_on_sigterm()
    figures: dict[str, Any] = {}
    measures = {"outage": measure_outage, "acks": measure_acks, "storm": measure_storm}
    for name in args.figures:
        if name == "soak":
            figures[name] = run_soak(args)
            continue
        with tempfile.TemporaryDirectory(prefix=f"sb_bench_faults_{name}_") as folder:
            figures[name] = measures[name](Path(folder), args)
    write_results("faults", {"parameters": vars(args), "figures": figures})


if __name__ == "__main__":
    main()
