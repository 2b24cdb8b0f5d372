"""Click to the worker's first provider call, with the worker tier (SPEECHBATCH_RUNNER=worker).

On PostgreSQL: gunicorn (2 web processes) that only claim, and 2 ``flask --app wsgi
worker`` processes that run the claims; the fake provider (``fake_tts.py``) in a process of
its own. SAMPLES times, one after the other: a 1-item job is made, then the clock starts,
``POST /api/jobs/ID/generate`` is sent (202), and the fake's call counter is read every
2 ms until it moves: that is the worker's first call of the run (woken by the claim's
NOTIFY, it takes the run by compare-and-set, plans it, starts the item and sends).
Figures: p50 and p99 of that delay in seconds. Target: p99 < 1 s (an absolute figure, not
a ratio: the wake-up is what it measures, and it does not scale with the machine).

Usage: python bench/worker_latency.py [--samples 100]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from _common import (
    ROOT,
    VENV_BIN,
    FakeProvider,
    app_env,
    bootstrap,
    exit_on_sigterm,
    fake_provider,
    figure,
    percentile,
    pg_database,
    write_results,
)
from _http import Api, Gunicorn

TARGET_P99 = 1.0
SERVING = "speechbatch worker serving"


@contextlib.contextmanager
def workers(env: Mapping[str, str], log_dir: Path, count: int) -> Iterator[None]:
    """``count`` worker processes, serving; SIGTERM (then SIGKILL) at the end."""
    procs, logs = [], []
    try:
        for n in range(count):
            log = log_dir / f"worker-{n}.log"
            logs.append(log)
            with log.open("wb") as out:
                procs.append(
                    subprocess.Popen(
                        [str(VENV_BIN / "flask"), "--app", "wsgi", "worker"],
                        cwd=ROOT,
                        env=dict(env),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + 60
        while not all(SERVING in log.read_text(errors="replace") for log in logs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("a worker did not start: " + logs[0].read_text()[-3000:])
            time.sleep(0.1)
        yield
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(35)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def first_call_delay(api: Api, provider: FakeProvider, n: int) -> float:
    """Seconds from the click to the provider's first call of a fresh 1-item job."""
    job_id = api.create_job([f"latency probe {n}: the quick brown fox."], f"probe {n}")
    before = provider.stats()["calls"]
    t0 = time.perf_counter()
    api.call("POST", f"/api/jobs/{job_id}/generate", expect=202)
    while provider.stats()["calls"] == before:
        if time.perf_counter() - t0 > 30:
            raise RuntimeError(f"no provider call for job {job_id} within 30 s")
        time.sleep(0.002)
    delay = time.perf_counter() - t0
    api.wait_done(job_id, 30)
    return delay


def main() -> None:
    """Measure, print the figures, write bench/results/worker_latency.json."""
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100)
    args = parser.parse_args()
    with (
        fake_provider(0.05) as provider,
        pg_database("workers") as url,
        tempfile.TemporaryDirectory(prefix="sb_bench_") as tmp,
    ):
        env = app_env(url, provider.url, Path(tmp) / "audio", RUNNER="worker")
        token = bootstrap(env)
        server = Gunicorn(env, Path(tmp), workers=2, threads=4)
        try:
            server.wait_ready()
            with workers(env, Path(tmp), 2):
                api = Api(server.base_url, token)
                first_call_delay(api, provider, -1)  # warm the connections and caches
                delays = [first_call_delay(api, provider, n) for n in range(args.samples)]
        finally:
            server.stop()
    p50, p99 = percentile(delays, 50), percentile(delays, 99)
    figures = {
        "click_to_first_call_p50_seconds": figure("click to first call p50 (s)", p50, "-", True),
        "click_to_first_call_p99_seconds": figure(
            "click to first call p99 (s)", p99, f"< {TARGET_P99:g}", p99 < TARGET_P99
        ),
    }
    write_results("worker_latency", {"samples": args.samples, "figures": figures})


if __name__ == "__main__":
    main()
