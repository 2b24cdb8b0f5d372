"""What psycopg's prepared statements are worth on the figures users feel, A/B in one run.

Behind PgBouncer in transaction mode prepared statements must be off (a statement prepared
on one server connection is looked for on another). This measures what turning them off
everywhere would cost (``_ab.py``): two deployments side by side, the same code; A with
psycopg's default (a statement prepared after 5 runs on a connection), B with
``?prepare_threshold=none`` in the database URL (never prepared).

- Figures 1 and 2 of ``throughput.py`` (``slow``: 4 jobs x 40 items, 0.5 s calls;
  ``fast``: 4 jobs x 24 items, 0.1 s calls; 8 slots, ``gunicorn -w 2 --threads 4``, each
  job polled 5 times a second): rounds alternate A, B, B, A, ...; median efficiency of each.
- Polls (``polling.py``'s, ``gunicorn -w 1``): three COMPLETED jobs of 10, 50 and 5,000
  items on each side; ``wrk -t2 -c8`` against the full read of the 50-item job, the
  summary of the 5,000-item job and a 304 of the 5,000-item job, alternating sides; the
  median requests per second of each.

Figures: B / A for each (1.0: no cost; below 0.95: turning them off loses more than 5%).

Usage: python bench/prepared.py [--rounds 4] [--poll-rounds 3] [--duration 5]
       [--figures slow fast polls]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

from _ab import Side, compare, polls, throughput
from _common import exit_on_sigterm, write_results

SIDES: dict[str, Side] = {
    "prepared": {},
    "unprepared": {"connect": lambda url: {"DATABASE_URL": url + "?prepare_threshold=none"}},
}


def parse_args() -> argparse.Namespace:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="throughput rounds per side")
    parser.add_argument("--poll-rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    parser.add_argument("--figures", nargs="+", default=["slow", "fast", "polls"])
    args = parser.parse_args()
    if "polls" in args.figures and shutil.which("wrk") is None:
        sys.exit("wrk is missing: apt-get install -y wrk")
    return args


def measure(sides: dict[str, Side], args: argparse.Namespace) -> dict[str, Any]:
    """The chosen figures for these two sides, B / A; what was measured and the figures."""
    a, b = list(sides)
    records: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    for name in ("slow", "fast"):
        if name in args.figures:
            raw[name] = throughput(sides, name, args.rounds)
            records[name] = compare(f"throughput {name}", raw[name], a, b)
    if "polls" in args.figures:
        raw["polls"] = polls(sides, args.poll_rounds, args.duration)
        for name, found in raw["polls"].items():
            records[name] = compare(f"poll {name}", found, a, b)
    return {"params": vars(args), "measured": raw, "figures": records}


def main() -> None:
    args = parse_args()
    exit_on_sigterm()
    write_results("prepared", measure(SIDES, args))


if __name__ == "__main__":
    main()
