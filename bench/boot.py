"""Boot: the CPU an app process spends loading the app (``import wsgi``).

Every gunicorn worker, every ``flask --app wsgi worker`` and every CLI run loads the app
on its own (gunicorn does not preload it), so the end-to-end and chaos tests, which start
hundreds of them, pay this many times over, and so does a deploy or a respawned worker.
Each round runs ``python -c "import wsgi"`` in a fresh process and reads its user + system
CPU seconds from the kernel (CPU, not wall time: on a shared machine wall time swings with
the load, CPU time much less). The figure is the median; the target is at most 2.5 s.

``--compare SRC`` alternates each round with the same import from another ``src`` folder
(e.g. an older commit's, from ``git archive``) put first on ``PYTHONPATH``, and prints
both medians and their ratio: an A/B in the same minutes.

Usage: python bench/boot.py [--rounds 7] [--compare /tmp/old/src]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
from pathlib import Path
from typing import Any

from _common import ROOT, VENV_BIN, exit_on_sigterm, figure, median, write_results

TARGET_CPU_SECONDS = 2.5
# What the app needs to import (a database URL; nothing is connected at import).
ENV = {
    "SPEECHBATCH_DATABASE_URL": "sqlite:////tmp/speechbatch-boot-bench.db",
    "SPEECHBATCH_SECRET_KEY": "bench",
}
PROBE = "import sys, wsgi; print(int('scipy.signal' in sys.modules))"


def boot_once(src: Path | None) -> tuple[float, bool]:
    """CPU seconds of one fresh ``import wsgi``; whether scipy.signal came with it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECHBATCH_")}
    env.update(ENV)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [str(VENV_BIN / "python"), "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, out.strip().endswith("1")


def main() -> None:
    """Measure the rounds, print the figure, write bench/results/boot.json."""
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--compare", type=Path, default=None)
    args = parser.parse_args()
    this: list[float] = []
    other: list[float] = []
    scipy_at_boot = False
    for n in range(args.rounds):
        cpu, scipy_loaded = boot_once(None)
        this.append(cpu)
        scipy_at_boot |= scipy_loaded
        line = f"round {n + 1}: this tree {cpu:.2f} CPU-s"
        if args.compare is not None:
            other.append(boot_once(args.compare)[0])
            line += f", {args.compare} {other[-1]:.2f} CPU-s"
        print(line, flush=True)
    data: dict[str, Any] = {"rounds": {"this": this, "compare": other}}
    value = median(this)
    data["boot_cpu_seconds"] = figure(
        "boot_cpu_seconds", value, f"<= {TARGET_CPU_SECONDS}", value <= TARGET_CPU_SECONDS
    )
    data["scipy_signal_at_boot"] = scipy_at_boot
    print(f"scipy.signal loaded at boot: {scipy_at_boot}")
    if other:
        base = median(other)
        data["compare"] = {"src": str(args.compare), "median": base, "ratio": value / base}
        print(f"compare median {base:.2f} CPU-s; this / compare {value / base:.3f}")
    write_results("boot", data)


if __name__ == "__main__":
    main()
