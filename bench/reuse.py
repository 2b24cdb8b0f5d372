"""Reuse benchmark: the fingerprint lookup stays flat as an organization's audio grows.

An organization holds N finished audios (N = 1,000, then 100,000 more, inserted as DONE
items with fingerprints, ANALYZEd). Timed: an item's start as the runner does it, in
one transaction that is rolled back so the item stays PENDING: the fence (UPDATE of the
job), the start whose RETURNING carries the lookup (newest DONE item of the
fingerprint, by ``ix_items_fingerprint_updated_at``), and for a hit the reuse move.
Half the probes hit an existing fingerprint, half miss. Target: the median at 100,000
within 1.2x of the median at 1,000. Also: statements per reused item (a job whose every
text exists already), counted like bench/statements.py.

Usage: python bench/reuse.py [--small 1000] [--large 100000] [--probes 1000] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import random
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
from sqlalchemy import insert, text
from statements import Counters
from tests.helpers import concrete

from speechbatch import create_app
from speechbatch import services as svc
from speechbatch.app import Services
from speechbatch.fingerprints import fingerprinter
from speechbatch.models import Item, ItemStatus, Job, JobStatus

TARGET_RATIO = 1.2
TARGET_STATEMENTS = 4.0
ROWS_PER_JOB = 5000


def store_audio(services: Services, org: int, start: int, count: int) -> None:
    """Insert ``count`` DONE items with distinct fingerprints (in jobs of 5,000)."""
    with concrete(services.uow_factory)() as uow:
        for first in range(start, start + count, ROWS_PER_JOB):
            n = min(ROWS_PER_JOB, start + count - first)
            job_id = uow.session.execute(
                insert(Job)
                .values(
                    organization_id=org,
                    title="stored",
                    voice="alloy",
                    status=JobStatus.COMPLETED,
                    attempt=1,
                    items_done=n,
                    version=1,
                )
                .returning(Job.id)
            ).scalar_one()
            uow.session.execute(
                insert(Item),
                [
                    {
                        "job_id": job_id,
                        "position": i,
                        "text": f"stored {first + i}",
                        "status": ItemStatus.DONE,
                        "audio_path": f"jobs/{job_id}/{i}.mp3",
                        "audio_bytes": 100,
                        "fingerprint": hashlib.sha256(str(first + i).encode()).hexdigest(),
                    }
                    for i in range(n)
                ],
            )
        uow.commit()
    with services.engine.connect() as conn:
        conn.execute(text("ANALYZE"))
        conn.commit()


def probe_job(services: Services, user: Any) -> tuple[int, list[int]]:
    """A claimed job whose items the probes start (and roll back)."""
    texts = [f"probe {i}" for i in range(50)]
    job_id = svc.create_job(services.uow_factory, user, "probe", "alloy", texts, services.limits)
    with services.uow_factory() as uow:
        attempt = uow.jobs.claim_job(
            job_id, user.organization_id, regenerate=False, user_id=None, worker_id=None
        )
        uow.commit()
    assert attempt == 1
    with services.uow_factory() as uow:
        ids = [i for i, _ in uow.runs.run_plan(job_id, attempt).items]
    return job_id, ids


def time_lookups(
    services: Services, job_id: int, item_ids: list[int], stored: int, n: int
) -> list[float]:
    """Seconds per start-with-lookup transaction (rolled back), hits and misses alternating."""
    rng = random.Random(7)
    seconds = []
    uow_factory = concrete(services.uow_factory)
    for k in range(n):
        hit = k % 2 == 0
        key = str(rng.randrange(stored)) if hit else f"missing {k}"
        fp = hashlib.sha256(key.encode()).hexdigest()
        item_id = item_ids[k % len(item_ids)]
        t0 = time.perf_counter()
        with uow_factory() as uow:
            started = uow.runs.start_item(job_id, 1, item_id, reuse_fingerprint=fp)
            assert started is not None and (started.reusable_item_id is not None) == hit
            if hit:
                assert started.reusable_item_id is not None
                assert uow.runs.reuse_audio(job_id, 1, item_id, started.reusable_item_id, fp)
            uow.rollback()
        seconds.append(time.perf_counter() - t0)
    return seconds


def statements_per_reused_item(services: Services, user: Any, n: int) -> dict[str, Any]:
    """Run a job of n texts once (sent), then again in a new job (every item reused)."""
    texts = [f"reused text {i}" for i in range(n)]
    first = svc.create_job(services.uow_factory, user, "first", "alloy", texts, services.limits)
    svc.start_generation(services.uow_factory, services.settings, services.runner, user, first)
    wait_for_runs(services, timeout=100)
    counters = Counters(services)
    sizes = {}
    for size in (10, n):
        job_id = svc.create_job(
            services.uow_factory, user, "again", "alloy", texts[:size], services.limits
        )
        counters.reset()
        counters.active = True
        svc.start_generation(services.uow_factory, services.settings, services.runner, user, job_id)
        wait_for_runs(services, timeout=100)
        counters.active = False
        view = svc.get_job(services.uow_factory, services.settings, user, job_id)
        assert view["status"] == "COMPLETED" and all(i["reused"] for i in view["items"])
        sizes[size] = counters.snapshot()["by_kind"]
    per_item = {
        k: (sizes[n].get(k, 0) - sizes[10].get(k, 0)) / (n - 10)
        for k in set(sizes[n]) | set(sizes[10])
        if not k.startswith(("BEGIN", "PRAGMA", "UPDATE workers"))
    }
    per_item = {k: v for k, v in per_item.items() if v}
    return {"by_kind": per_item, "statements_per_item": sum(per_item.values())}


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(backend, "reuse") as url, tempfile.TemporaryDirectory() as tmp:
        settings = bench_settings(url, tmp, item_concurrency=4)
        app = create_app(settings, provider=fake_provider())
        services: Services = app.extensions["speechbatch"]
        try:
            user = bench_admin(services)
            services.runner.worker_id()
            out: dict[str, Any] = {"reused_item": statements_per_reused_item(services, user, 200)}
            job_id, item_ids = probe_job(services, user)
            stored = 0
            for size in (args.small, args.large):
                store_audio(services, user.organization_id, stored, size - stored)
                stored = size
                time_lookups(services, job_id, item_ids, stored, 50)  # warm up
                seconds = time_lookups(services, job_id, item_ids, stored, args.probes)
                out[str(size)] = {
                    "median_ms": median(seconds) * 1000,
                    "p95_ms": percentile(seconds, 95) * 1000,
                }
            ratio = out[str(args.large)]["median_ms"] / out[str(args.small)]["median_ms"]
            out["ratio"] = ratio
            out["pass"] = ratio <= TARGET_RATIO and (
                out["reused_item"]["statements_per_item"] <= TARGET_STATEMENTS
            )
            # The fingerprint function is the one the runner uses (a sanity check).
            assert len(fingerprinter(services.provider)(1, "alloy", "x")) == 64
        finally:
            services.runner.drain(5.0)
            services.engine.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--probes", type=int, default=1000)
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    backends = ["postgresql"] if args.no_sqlite else ["postgresql", "sqlite"]
    results: dict[str, Any] = {
        "params": vars(args),
        "target_ratio": TARGET_RATIO,
        "target_statements_per_reused_item": TARGET_STATEMENTS,
    }
    for backend in backends:
        results[backend] = run_backend(backend, args)
    small, large = str(args.small), str(args.large)
    print_table(
        f"Reuse lookup (start + lookup [+ reuse], rolled back): {args.small:,} vs "
        f"{args.large:,} stored audios; target ratio <= {TARGET_RATIO}",
        [
            "backend",
            f"{small} median ms",
            f"{large} median ms",
            "ratio",
            "p95 ms (large)",
            "stmts/reused item",
            "verdict",
        ],
        [
            [
                b,
                results[b][small]["median_ms"],
                results[b][large]["median_ms"],
                results[b]["ratio"],
                results[b][large]["p95_ms"],
                results[b]["reused_item"]["statements_per_item"],
                verdict(results[b]["pass"]),
            ]
            for b in backends
        ],
    )
    write_results("reuse", results)


if __name__ == "__main__":
    main()
