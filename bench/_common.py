"""Shared helpers of the benchmark scripts: throw-away databases, timing, results.

Every script creates its own database (PostgreSQL: CREATE DATABASE on the running
server, dropped afterwards; SQLite: a file in a temporary directory), migrates it with
``speechbatch.migrate.upgrade`` and writes its figures to ``bench/results/NAME.json``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
PG_ADMIN_DSN = os.environ.get(
    "SPEECHBATCH_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
PG_URL_BASE = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)

# The repository root, so that ``tests.fakes`` (the FakeProvider) can be imported.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def fake_provider(latency: float = 0.0) -> Any:
    """The test suite's FakeProvider (tests/fakes.py)."""
    return importlib.import_module("tests.fakes").FakeProvider(latency=latency)


def _pg_admin() -> psycopg.Connection[Any]:
    return psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=3)


@contextlib.contextmanager
def fresh_database(backend: str, label: str) -> Iterator[str]:
    """A fresh migrated database URL of ``backend``; dropped (or deleted) afterwards."""
    from speechbatch.migrate import upgrade

    if backend == "sqlite":
        tmp = Path(tempfile.mkdtemp(prefix=f"sb_bench_{label}_"))
        url = f"sqlite:///{tmp / 'bench.db'}"
        try:
            upgrade(url)
            yield url
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    name = f"sb_bench_{label}_{uuid.uuid4().hex[:8]}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = f"{PG_URL_BASE}/{name}"
        upgrade(url)
        yield url
    finally:
        with _pg_admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bench_settings(database_url: str, storage_dir: str, **changes: Any) -> Any:
    """Validated settings for a benchmark run (fake-provider voices)."""
    from speechbatch.config import Settings

    values: dict[str, Any] = {
        "database_url": database_url,
        "secret_key": "bench-secret",
        "storage_dir": storage_dir,
        "tts_voices": ("alloy", "echo"),
    }
    values.update(changes)
    return Settings(**values).validate()


def bench_admin(services: Any) -> Any:
    """Create the admin "bench@bench.test" of organization "bench"; its user record."""
    return importlib.import_module("tests.helpers").new_admin(services, "bench", "bench@bench.test")


def wait_for_runs(services: Any, timeout: float) -> None:
    """Block until the app's runner has no live run (the run's finish is committed by then).

    Joins the runs' threads rather than polling: a loop that wakes every millisecond in
    the measured process takes the GIL from the runner's threads a thousand times a
    second, which no deployment does (gunicorn's threads wait on their sockets).
    """
    deadline = time.monotonic() + timeout
    while runs := services.runner.live_runs():
        names = {f"speechbatch-job-{job_id}-a{attempt}" for job_id, attempt in runs}
        threads = [t for t in threading.enumerate() if t.name in names]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if time.monotonic() > deadline:
            raise TimeoutError("the run did not end in time")
        if not threads:  # started but not yet named, or between its pop and its end
            time.sleep(0.001)


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, round(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float:
    """The median."""
    return statistics.median(values)


class Timer:
    """``with Timer() as t: ...``; ``t.seconds`` afterwards."""

    seconds = 0.0

    def __enter__(self) -> Timer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._start


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a plain aligned table."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.0f}"
        return str(v)

    body = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in body:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def write_results(name: str, data: dict[str, Any]) -> Path:
    """Write ``bench/results/NAME.json`` with the machine's description."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    data = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            # Other processes share these machines: the load at the end of the run.
            "loadavg_1_5_15": os.getloadavg(),
        },
        **data,
    }
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(f"\nresults written to {path.relative_to(ROOT)}")
    return path


def verdict(ok: bool) -> str:
    """PASS or MISS."""
    return "PASS" if ok else "MISS"
