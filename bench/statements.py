"""Statements per sent item: what the runner asks of the database for each provider call.

On PostgreSQL, in this process (the app's own threads run the job; the provider is the
fake one in a process of its own, answering at once, and a monthly budget is set so that
every call is reserved): a job of SMALL items and one of LARGE items, each with texts of
its own (so every item is sent), are clicked and waited for through the API. A SQLAlchemy
listener on every engine counts the statements that the app's background threads (the
run's threads, its heartbeat) send while each job runs; the clicking and waiting thread's
own requests are not counted. Per item = (count(LARGE) - count(SMALL)) / (LARGE - SMALL),
which leaves out what a run does once (its claim, its end); the statements sent by the clock
rather than by the item (the pause read, the heartbeat) are listed per second of the runs
and are not in the figure. Target: <= 8. Every kind of
statement is listed (its first words) with its count per item, and so are transactions
(COMMITs) per item: psycopg's BEGIN is not a statement SQLAlchemy sees.

Usage: python bench/statements.py [--small 10] [--large 1000]
"""

from __future__ import annotations

import argparse
import collections
import re
import threading
import time
from typing import Any

from _common import exit_on_sigterm, fake_provider, figure, write_results
from _inprocess import InProcess, app_in_process
from flask.testing import FlaskClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

TARGET = 8.0
# Statements a process sends by the clock, not by the item: the gate's read of the
# deployment's pause (at most every PAUSE_CACHE_SECONDS) and the heartbeat (the worker's
# row and its runs' beat). A longer run (a slower machine) sends more of them per item;
# they are listed per second instead.
BY_THE_CLOCK = ("SELECT FROM provider_pace", "UPDATE workers", "UPDATE runs")


class Counter:
    """Statements by kind and commits, from threads other than the one that drives."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kinds: collections.Counter[str] = collections.Counter()
        self.commits = 0
        self.active = False
        self.driver = threading.get_ident()
        event.listen(Engine, "before_cursor_execute", self._statement)
        event.listen(Engine, "commit", self._commit)

    def _counts(self) -> bool:
        return self.active and threading.get_ident() != self.driver

    def _statement(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self._counts():
            with self.lock:
                self.kinds[kind_of(statement)] += 1

    def _commit(self, conn: Any) -> None:
        if self._counts():
            with self.lock:
                self.commits += 1

    def take(self) -> dict[str, Any]:
        """The counts so far; zeroed."""
        with self.lock:
            taken = {"kinds": dict(self.kinds), "commits": self.commits}
            self.kinds.clear()
            self.commits = 0
        return taken


def kind_of(statement: str) -> str:
    """``UPDATE jobs``, ``INSERT INTO items``, ``SELECT FROM slots``, ``WITH ...``."""
    words = statement.split()
    if not words:
        return "?"
    verb = words[0].upper()
    if verb == "UPDATE":
        return f"UPDATE {words[1]}"
    if verb in ("INSERT", "DELETE"):
        return f"{verb} {words[2]}"
    found = re.search(r"\bFROM\s+(\S+)", statement, re.IGNORECASE)
    return f"{verb} FROM {found.group(1)}" if verb == "SELECT" and found else verb


def run_job(unit: InProcess, client: FlaskClient, counter: Counter, n: int) -> dict[str, Any]:
    """Create a job of ``n`` new texts, click it, wait until COMPLETED; the counts meanwhile."""
    texts = [f"{time.monotonic_ns()} item {i}" for i in range(n)]
    job = unit.call(
        client, "POST", "/api/jobs", {"title": f"{n}", "voice": "alloy", "items": texts}, expect=201
    )
    counter.take()
    began = time.monotonic()
    counter.active = True
    unit.call(client, "POST", f"/api/jobs/{job['id']}/generate", expect=202)
    deadline = time.monotonic() + 300
    while unit.call(client, "GET", f"/api/jobs/{job['id']}?items=none")["status"] != "COMPLETED":
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {n}-item job did not complete within 300 s")
        time.sleep(0.05)
    while unit.call(client, "GET", f"/api/jobs/{job['id']}")["runs"][-1]["finished_at"] is None:
        time.sleep(0.01)
    time.sleep(0.1)  # what the run's threads do after they end it (nothing, by now)
    counter.active = False
    return {**counter.take(), "seconds": time.monotonic() - began}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--large", type=int, default=1000)
    args = parser.parse_args()
    exit_on_sigterm()
    with (
        fake_provider(0.0) as provider,
        app_in_process(provider.url) as unit,
        unit.app.test_client() as client,
    ):
        counter = Counter()
        run_job(unit, client, counter, 3)  # warm up the pools and caches
        small = run_job(unit, client, counter, args.small)
        large = run_job(unit, client, counter, args.large)
    span = args.large - args.small
    kinds = {
        k: (large["kinds"].get(k, 0) - small["kinds"].get(k, 0)) / span
        for k in sorted(set(large["kinds"]) | set(small["kinds"]))
    }
    kinds = {k: v for k, v in kinds.items() if v}  # a run's own statements cancel out
    by_item = {k: v for k, v in kinds.items() if k not in BY_THE_CLOCK}
    for k, per_item in sorted(by_item.items(), key=lambda kv: -kv[1]):
        print(f"  {per_item:6.3f} per item  {k}")
    seconds = large["seconds"] + small["seconds"]
    for k in BY_THE_CLOCK:
        count = large["kinds"].get(k, 0) + small["kinds"].get(k, 0)
        print(f"  {count / seconds:6.3f} per second of the runs  {k} (not per item)")
    commits = (large["commits"] - small["commits"]) / span
    print(f"  transactions (COMMIT) per item: {commits:.3f}")
    per_item = sum(by_item.values())
    record = figure("statements per sent item", per_item, f"<= {TARGET:g}", per_item <= TARGET)
    write_results(
        "statements",
        {
            "params": vars(args),
            "per_item_by_kind": by_item,
            "by_the_clock_per_item": {k: v for k, v in kinds.items() if k in BY_THE_CLOCK},
            "commits_per_item": commits,
            "figure": record,
        },
    )


if __name__ == "__main__":
    main()
