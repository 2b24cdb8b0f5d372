"""A lexicon change on an organization with 100,000 DONE items: time until every stale mark
is written (issue 29's target: 10 s on PostgreSQL; SQLite reported too).

The items (and their takes) are inserted with bulk SQL, not made by the runner: ``--jobs``
jobs of ``--items`` DONE items, one in ten of them saying "SQL". The clock starts before
``PUT /api/lexicon`` (SQL -> sequel) and stops when ``GET /api/lexicon`` says
``"stale_pass": "done"``; the stale items are then counted (one in ten must be). A second
PUT takes the rule back (every mark comes off again) and is timed the same way, as is the
page's dry-run count (``POST /api/lexicon/impact``, then its ``url`` read until complete).

    .venv/bin/python bench/lexicon.py [--jobs 100 --items 1000] [--backend both]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import app_env, bootstrap, exit_on_sigterm, figure, pg_database, write_results
from _inprocess import InProcess
from sqlalchemy import text

TARGET_SECONDS = 10.0
SERIES = "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :n)"


@contextlib.contextmanager
def app_on(backend: str) -> Iterator[InProcess]:
    """``create_app()`` on a fresh bootstrapped database of ``backend``."""
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sb_bench_")))
        if backend == "postgresql":
            url = stack.enter_context(pg_database("lexicon"))
        else:
            url = f"sqlite:///{tmp / 'bench.db'}"
        env = app_env(url, "http://127.0.0.1:9/v1", tmp / "audio")
        token = bootstrap(env)
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        try:
            from speechbatch import create_app

            app = create_app()
            logging.disable(logging.INFO)
            services = app.extensions["speechbatch"]
            try:
                yield InProcess(app, services, token)
            finally:
                services.dispose()
        finally:
            os.environ.clear()
            os.environ.update(saved)


def insert_done_items(unit: InProcess, jobs: int, items: int) -> None:
    """``jobs`` COMPLETED jobs of ``items`` DONE items each, every item with its take."""
    with unit.services.engine.begin() as conn:
        org = conn.execute(text("SELECT id FROM organizations")).scalar_one()
        conn.execute(
            text(
                f"{SERIES} INSERT INTO jobs (organization_id, title, voice, status, attempt,"
                " items_done, options, version) SELECT :org, 'bench ' || n, 'alloy',"
                " 'COMPLETED', 1, :items, '{}', 0 FROM g"
            ),
            {"n": jobs, "org": org, "items": items},
        )
        conn.execute(
            text(
                f"{SERIES} INSERT INTO items (job_id, position, text, status, audio_path,"
                " current_take, stale, reused) SELECT jobs.id, n, 'Line ' || n || ' of job '"
                " || jobs.id || (CASE WHEN n % 10 = 0 THEN ' is about SQL.' ELSE ' is plain.'"
                " END), 'DONE', 'jobs/' || jobs.id || '/' || n || '.mp3', 1, false, false"
                " FROM jobs, g"
            ),
            {"n": items},
        )
        conn.execute(
            text(
                "INSERT INTO takes (item_id, take, text, spoken_text, voice, options,"
                " audio_path, reused) SELECT items.id, 1, items.text, items.text, 'alloy',"
                " '{}', items.audio_path, false FROM items"
            )
        )
    with unit.services.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("ANALYZE"))


def stale_count(unit: InProcess) -> int:
    with unit.services.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM items WHERE stale")).scalar_one())


def timed_put(unit: InProcess, client: Any, rules: list[dict[str, Any]]) -> tuple[float, float]:
    """(seconds the PUT took, seconds until every stale mark was written)."""
    started = time.monotonic()
    unit.call(client, "PUT", "/api/lexicon", {"rules": rules})
    answered = time.monotonic() - started
    while unit.call(client, "GET", "/api/lexicon")["stale_pass"] != "done":
        if time.monotonic() - started > 300:
            raise RuntimeError("the stale pass did not end within 300 s")
        time.sleep(0.02)
    return answered, time.monotonic() - started


def measure(backend: str, jobs: int, items: int) -> dict[str, Any]:
    with app_on(backend) as unit, unit.app.test_client() as client:
        started = time.monotonic()
        insert_done_items(unit, jobs, items)
        print(
            f"{backend}: {jobs * items:,} DONE items inserted in {time.monotonic() - started:.1f} s"
        )
        rule = [{"match": "SQL", "say": "sequel"}]
        started = time.monotonic()
        asked = unit.call(client, "POST", "/api/lexicon/impact", {"rules": rule}, expect=202)
        impact = unit.call(client, "GET", asked["url"])
        while not impact["complete"]:  # counted in the background: read until done
            if time.monotonic() - started > 300:
                raise RuntimeError("the dry run did not end within 300 s")
            time.sleep(0.02)
            impact = unit.call(client, "GET", asked["url"])
        dry_run = time.monotonic() - started
        put_s, marked_s = timed_put(unit, client, rule)
        stale = stale_count(unit)
        assert stale == jobs * items // 10 == impact["lines"], (stale, impact)
        revert_put_s, revert_s = timed_put(unit, client, [])
        assert stale_count(unit) == 0
    print(
        f"{backend}: dry run {dry_run:.2f} s ({impact['lines']:,} lines in {impact['jobs']} jobs);"
        f" PUT answered in {put_s:.3f} s, {stale:,} marks written in {marked_s:.2f} s;"
        f" revert: answered {revert_put_s:.3f} s, marks off in {revert_s:.2f} s"
    )
    return {
        "dry_run_seconds": dry_run,
        "put_seconds": put_s,
        "marked_seconds": marked_s,
        "revert_seconds": revert_s,
        "stale": stale,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    args = parser.parse_args()
    exit_on_sigterm()
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    results: dict[str, Any] = {"params": vars(args), "loadavg": os.getloadavg()}
    n = args.jobs * args.items
    for backend in backends:
        found = measure(backend, args.jobs, args.items)
        seconds = max(found["marked_seconds"], found["revert_seconds"])
        name = f"lexicon change, stale marks of {n:,} items written, {backend} (s)"
        found["figure"] = figure(name, seconds, f"<= {TARGET_SECONDS:g}", seconds <= TARGET_SECONDS)
        results[backend] = found
    print(f"load average: {os.getloadavg()}")
    write_results("lexicon", results)


if __name__ == "__main__":
    main()
