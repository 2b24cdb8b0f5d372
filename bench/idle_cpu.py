"""Idle: the CPU a quick-start server spends doing nothing.

A deployment is idle most of its life, and each of its processes keeps looking for work
(due webhook deliveries, stale passes, resumes, heartbeats): that is a poll's cost paid
every second, on every server. Each round starts ``gunicorn wsgi:app -w 2 --threads 4`` on
a fresh SQLite file as the quick start does, lets it settle, then reads the user + system
CPU of the master and its workers from the kernel over ``--seconds`` (CPU, not wall time).
The figure is the median, as a percentage of one core; the target is at most 2%.

``--compare SRC`` alternates each round with a server whose ``src`` is another folder (e.g.
an older commit's, from ``git archive``), first on ``PYTHONPATH``: an A/B in the same minutes.

Usage: python bench/idle_cpu.py [--rounds 3] [--seconds 30] [--compare /tmp/old/src]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from _common import (
    alternated,
    alternated_results,
    cli,
    exit_on_sigterm,
    quickstart_env,
    write_results,
)
from _http import Gunicorn

TARGET_PERCENT = 2.0
SETTLE_SECONDS = 10.0


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def idle_percent(src: Path | None, seconds: float) -> float:
    """Percent of one core the server (master and workers) used while idle."""
    with tempfile.TemporaryDirectory(prefix="sb_idle_") as tmp:
        env = quickstart_env(Path(tmp), "idle-bench")
        if src is not None:
            env["PYTHONPATH"] = str(src)
        cli(env, "db", "upgrade")
        server = Gunicorn(env, Path(tmp), workers=2, threads=4)
        try:
            server.wait_ready()
            time.sleep(SETTLE_SECONDS)
            children = subprocess.run(
                ["pgrep", "-P", str(server.proc.pid)], capture_output=True, text=True
            ).stdout.split()
            pids = [server.proc.pid, *map(int, children)]
            before, began = _cpu_seconds(pids), time.monotonic()
            time.sleep(seconds)
            used = _cpu_seconds(pids) - before
            return 100.0 * used / (time.monotonic() - began)
        finally:
            server.stop()


def main() -> None:
    """Measure the rounds, print the figure, write bench/results/idle_cpu.json."""
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--compare", type=Path, default=None)
    args = parser.parse_args()
    found = alternated(
        args.rounds, lambda src: idle_percent(src, args.seconds), args.compare, "% of a core"
    )
    data = alternated_results(found, vars(args), "idle_cpu_percent", TARGET_PERCENT)
    write_results("idle_cpu", data)


if __name__ == "__main__":
    main()
