"""A/B of bench/throughput.py: another checkout of the code (A) against this one (B),
alternated in one run, so that the machine's load falls on both alike.

``python bench/ab_throughput.py OTHER_TREE --latency 2 --pairs 3`` runs
``bench/throughput.py slow --latency L`` (4 jobs x 40 items, 3 rounds each) in OTHER_TREE
and here, A B A B ..., and prints each run's efficiency (the median of its rounds), the
medians of A and of B and B/A. OTHER_TREE is e.g. ``git worktree add`` or ``git archive``
of main; it runs with this checkout's ``.venv`` (linked into it when it has none) and its
own ``src`` first on PYTHONPATH, so its gunicorn serves its own code.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
FIGURE_LINE = re.compile(r"^FIGURE [^=]*= ([0-9.]+)", re.M)


def one(tree: Path, latency: float, extra: list[str]) -> tuple[float, list[float]]:
    """One run of throughput.py in ``tree``: its efficiency and its rounds'."""
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    command = [sys.executable, "bench/throughput.py", "slow", "--latency", f"{latency:g}", *extra]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
    found = FIGURE_LINE.search(done.stdout)
    if found is None:
        raise SystemExit(f"no FIGURE line from {tree}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    results = json.loads((tree / "bench" / "results" / "throughput_slow.json").read_text())
    return float(found.group(1)), [round(r["efficiency"], 3) for r in results["rounds"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout (A)")
    parser.add_argument("--latency", type=float, default=2.0)
    parser.add_argument("--pairs", type=int, default=3)
    args, extra = parser.parse_known_args()
    other = args.other.resolve()
    if not (other / ".venv").exists():
        (other / ".venv").symlink_to(HERE / ".venv")
    runs: dict[str, list[float]] = {"A": [], "B": []}
    for pair in range(1, args.pairs + 1):
        for side, tree in (("A", other), ("B", HERE)):
            efficiency, rounds = one(tree, args.latency, extra)
            runs[side].append(efficiency)
            load = os.getloadavg()[0]
            print(f"pair {pair} {side} ({tree}): {efficiency:.3f} (rounds {rounds})  "
                  f"load {load:.1f}  {time.strftime('%H:%M:%S')}", flush=True)  # fmt: skip
    a, b = statistics.median(runs["A"]), statistics.median(runs["B"])
    print(f"latency {args.latency:g} s: A median {a:.3f} {runs['A']}, "
          f"B median {b:.3f} {runs['B']}, B/A {b / a:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
