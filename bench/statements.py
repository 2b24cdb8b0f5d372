"""Statements per item, round trips per item, and memory per 1,000 items.

Statements are counted with a ``before_cursor_execute`` listener on the app's engine
while a job runs through ``services.start_generation`` (FakeProvider, no latency).
The per-run constant (claim, reads, finish) is removed by running a small and a large
job: per item = (S(large) - S(small)) / (large - small). Target: at most 6 per item
(the start's fence and move, the budget reservation and the run's ledger line; the
finish's move, which shares the next start's fence; the provider slot's renewal; the
reuse lookup rides in the start's move). Every job has texts
of its own, so each item is sent (a reused item costs 4: bench/reuse.py).
Transaction framing (BEGIN, COMMIT, SQLite's PRAGMA query_only at BEGIN), the worker's
heartbeat and the read of a 429 pause (both by the clock) are not statements of the
item; they are reported separately, and "driver calls" adds them up with the pool's
pre-ping (on PostgreSQL each is a network round trip).

Memory: tracemalloc peak while creating and running a 1,000-item job against a 10-item
job in the same process; per 1,000 items = (peak(1000) - peak(10)) x 1000 / 990.

Usage: python bench/statements.py [--small 10] [--large 1000] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import gc
import logging
import resource
import tempfile
import threading
import tracemalloc
from collections import Counter
from typing import Any

from _common import (
    bench_admin,
    bench_settings,
    fake_provider,
    fresh_database,
    print_table,
    verdict,
    wait_for_runs,
    write_results,
)
from sqlalchemy import event

from speechbatch import create_app
from speechbatch import services as svc
from speechbatch.app import Services

TARGET = 6.0
_JOBS = iter(range(10**9))


class Counters:
    """Statements (by kind), pings, commits and transactions seen on one engine."""

    def __init__(self, services: Services) -> None:
        self.lock = threading.Lock()
        self.statements: Counter[str] = Counter()
        self.pings = 0
        self.commits = 0
        self.begins = 0
        self.active = False
        engine = services.engine

        @event.listens_for(engine, "before_cursor_execute")
        def _stmt(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if not self.active:
                return
            words = statement.split()
            kind = " ".join(words[:2]) if words else "?"
            if words and words[0] == "UPDATE":
                kind = f"UPDATE {words[1]}"
            elif words and words[0] == "INSERT":
                kind = f"INSERT {words[2]}"
            elif words and words[0] == "SELECT":
                frm = words.index("FROM") if "FROM" in words else -1
                kind = f"SELECT {words[frm + 1]}" if frm >= 0 else "SELECT"
            with self.lock:
                self.statements[kind] += 1

        @event.listens_for(engine, "commit")
        def _commit(conn: Any) -> None:
            if self.active:
                with self.lock:
                    self.commits += 1

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            if self.active:
                with self.lock:
                    self.begins += 1

        original_ping = engine.dialect.do_ping

        def ping(dbapi_connection: Any) -> bool:
            if self.active:
                with self.lock:
                    self.pings += 1
            return bool(original_ping(dbapi_connection))

        engine.dialect.do_ping = ping  # type: ignore[method-assign]

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "statements": sum(self.statements.values()),
                "by_kind": dict(self.statements),
                "pings": self.pings,
                "commits": self.commits,
                "transactions": self.begins,
            }

    def reset(self) -> None:
        with self.lock:
            self.statements.clear()
            self.pings = self.commits = self.begins = 0


def run_job(services: Services, user: Any, n: int) -> None:
    """Create a job of n items and run it to COMPLETED (the measured unit)."""
    texts = [f"job {next(_JOBS)} item number {i}" for i in range(n)]
    job_id = svc.create_job(services.uow_factory, user, "stmt", "alloy", texts, services.limits)
    svc.start_generation(services.uow_factory, services.settings, services.runner, user, job_id)
    wait_for_runs(services, timeout=100)
    view = svc.get_job_summary(services.uow_factory, services.settings, user, job_id)
    assert view["status"] == "COMPLETED", view["status"]


# Transaction framing (SQLite's writer also sets PRAGMA query_only at its BEGIN, so that a
# pooled connection never carries a reader's setting into a writer) and what runs by the
# clock, not per item: the worker's heartbeat, and the read of a deployment-wide 429
# pause, at most once per PAUSE_CACHE_SECONDS per process (slots.py). "driver calls"
# still counts all of them.
NOT_PER_ITEM = ("BEGIN", "PRAGMA query_only", "UPDATE workers", "SELECT provider_pace")


def count_statements(
    services: Services, user: Any, backend: str, small: int, large: int
) -> dict[str, Any]:
    counters = Counters(services)
    run_job(services, user, 3)  # warm up
    per_size = {}
    for n in (small, large):
        counters.reset()
        counters.active = True
        run_job(services, user, n)
        counters.active = False
        per_size[n] = counters.snapshot()
    s, lg = per_size[small], per_size[large]
    span = large - small

    def per_item(key: str) -> float:
        return (lg[key] - s[key]) / span

    by_kind = {
        k: (lg["by_kind"].get(k, 0) - s["by_kind"].get(k, 0)) / span
        for k in sorted(set(lg["by_kind"]) | set(s["by_kind"]))
    }
    framing = {k: v for k, v in by_kind.items() if k.startswith(NOT_PER_ITEM)}
    stmts = sum(v for k, v in by_kind.items() if not k.startswith(NOT_PER_ITEM))
    constant = (
        s["statements"]
        - sum(s["by_kind"].get(k, 0) for k in by_kind if k.startswith(NOT_PER_ITEM))
        - stmts * small
    )
    # psycopg opens each transaction with a separate BEGIN round trip that no cursor
    # event sees; SQLite's BEGIN IMMEDIATE is seen (and listed under framing).
    begin_trips = per_item("transactions") if backend == "postgresql" else 0.0
    return {
        "small": s,
        "large": lg,
        "statements_per_item": stmts,
        "statements_per_item_by_kind": {
            k: v for k, v in by_kind.items() if v and not k.startswith(NOT_PER_ITEM)
        },
        "excluded_per_item": framing,
        "per_run_constant_statements": constant,
        "transactions_per_item": per_item("transactions"),
        "driver_calls_per_item": per_item("statements")
        + per_item("pings")
        + per_item("commits")
        + begin_trips,
        "pings_per_item": per_item("pings"),
        "commits_per_item": per_item("commits"),
        "pass": stmts <= TARGET,
    }


def measure_memory(services: Services, user: Any, small: int, large: int) -> dict[str, Any]:
    """tracemalloc peak and max-RSS growth of creating + running a job of each size."""
    out: dict[str, Any] = {}
    for n in (small, large):
        gc.collect()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        run_job(services, user, n)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out[str(n)] = {
            "tracemalloc_peak_kib": peak / 1024,
            "max_rss_growth_kib": rss_after - rss_before,
        }
    delta = out[str(large)]["tracemalloc_peak_kib"] - out[str(small)]["tracemalloc_peak_kib"]
    out["tracemalloc_peak_kib_per_1000_items"] = delta * 1000 / (large - small)
    return out


def run_backend(backend: str, small: int, large: int) -> dict[str, Any]:
    with fresh_database(backend, "stmt") as url, tempfile.TemporaryDirectory() as tmp:
        settings = bench_settings(url, tmp, item_concurrency=4)
        app = create_app(settings, provider=fake_provider(latency=0.0))
        services: Services = app.extensions["speechbatch"]
        try:
            user = bench_admin(services)
            services.runner.worker_id()
            # Memory first (no listener attached yet), then the statement counts.
            run_job(services, user, small)  # warm up caches and the pool
            memory = measure_memory(services, user, small, large)
            statements = count_statements(services, user, backend, small, large)
        finally:
            services.runner.drain(5.0)
            services.dispose()
    return {"statements": statements, "memory": memory}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--large", type=int, default=1000)
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    backends = ["postgresql"] if args.no_sqlite else ["postgresql", "sqlite"]
    results: dict[str, Any] = {"params": vars(args), "target_statements_per_item": TARGET}
    for backend in backends:
        results[backend] = run_backend(backend, args.small, args.large)
    rows = []
    for b in backends:
        st = results[b]["statements"]
        rows.append(
            [
                b,
                st["statements_per_item"],
                st["per_run_constant_statements"],
                st["transactions_per_item"],
                st["driver_calls_per_item"],
                verdict(st["pass"]),
            ]
        )
    print_table(
        f"Statements per item (jobs of {args.small} and {args.large} items; target <= {TARGET})",
        ["backend", "stmts/item", "per-run const", "txns/item", "driver calls/item", "verdict"],
        rows,
    )
    for b in backends:
        kinds = results[b]["statements"]["statements_per_item_by_kind"]
        print_table(
            f"{b}: statements per item by kind",
            ["statement", "per item"],
            [[k, v] for k, v in kinds.items()],
        )
    print_table(
        "Memory: tracemalloc peak while creating + running one job",
        ["backend", f"{args.small} items KiB", f"{args.large} items KiB", "KiB per 1,000 items"],
        [
            [
                b,
                results[b]["memory"][str(args.small)]["tracemalloc_peak_kib"],
                results[b]["memory"][str(args.large)]["tracemalloc_peak_kib"],
                results[b]["memory"]["tracemalloc_peak_kib_per_1000_items"],
            ]
            for b in backends
        ],
    )
    write_results("statements", results)


if __name__ == "__main__":
    main()
