"""Where a watched run's time goes, lane by lane: the breakdown behind bench/watched.py.

The watched benchmark's jobs (gunicorn -w 1 --threads 4 on PostgreSQL, a fake provider
that answers after 100 ms in a process of its own, 96 items with 8 in flight; the
watched one polled 50 times a second), with a probe in the gunicorn worker
(``bench/lanes_probe/sitecustomize.py``) that stamps, on the worker's monotonic clock,
the run's start (right after the claim) and end and each provider call's send and
answer by thread (one thread per lane). Per job, the run's wall time is split exactly
into the mean lane's parts:

    wall = first send + calls (beyond the provider's latency) + gaps between a lane's
           calls + n x latency + end (from the mean lane's last answer to the run's end:
           the lanes' uneven finish, the last finishes and the run's own end)

and the worker's CPU time over the run is given in cores (1.0: one core all along).
Nothing is asserted: this is the map for work on the watched figure.

Usage: python bench/lanes.py [--rounds 1] [--items 96] [--latency 0.1] [--concurrency 8]
                             [--tree PATH/src]   (another source tree, e.g. a patched copy)
"""

from __future__ import annotations

import glob
import itertools
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from _common import median, percentile, print_table, write_results
from _http import fake_provider_process, gunicorn_app
from watched import job_arguments, one_job

PROBE = Path(__file__).resolve().parent / "lanes_probe"


def split_runs(events: list[list[Any]]) -> dict[int, dict[str, Any]]:
    """The probe's events, per job: start/end (clock and CPU) and each lane's calls."""
    runs: dict[int, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    sent: dict[str, float] = {}
    for at, kind, thread, details in events:
        if kind == "run_start":
            current = runs[details["job"]] = {"start": at, "cpu0": details["cpu"], "lanes": {}}
        elif kind == "run_end":
            runs[details["job"]].update(end=at, cpu1=details["cpu"])
        elif current is not None and kind == "send":
            sent[thread] = at
        elif current is not None and kind == "answer" and thread in sent:
            current["lanes"].setdefault(thread, []).append((sent.pop(thread), at))
    return runs


def breakdown(run: dict[str, Any], latency: float) -> dict[str, Any]:
    """One run's wall time split into the mean lane's parts (milliseconds)."""
    start, lanes = run["start"], list(run["lanes"].values())
    firsts = [calls[0][0] - start for calls in lanes]
    lasts = [calls[-1][1] - start for calls in lanes]
    durations = [answer - send for calls in lanes for send, answer in calls]
    gaps = [b[0] - a[1] for calls in lanes for a, b in itertools.pairwise(calls)]
    n = len(lanes)
    wall = run["end"] - start
    calls = sum(len(c) for c in lanes)
    parts = {
        "first_send": sum(firsts) / n,
        "calls_beyond_latency": (sum(durations) - calls * latency) / n,
        "gaps": sum(gaps) / n,
        "latency": calls * latency / n,
        "end": wall - sum(lasts) / n,
    }
    return {
        "wall_ms": wall * 1000,
        "parts_ms": {k: v * 1000 for k, v in parts.items()},
        "lanes": n,
        "calls": calls,
        "first_send_ms": [round(f * 1000, 1) for f in sorted(firsts)],
        "last_answer_ms": [round(v * 1000, 1) for v in sorted(lasts)],
        "call_ms": {"p50": median(durations) * 1000, "mean": sum(durations) / calls * 1000},
        "gap_ms": {
            "p50": median(gaps) * 1000,
            "mean": sum(gaps) / len(gaps) * 1000,
            "p90": percentile(gaps, 90) * 1000,
        }
        if gaps
        else {},
        "worker_cpu_cores": (run["cpu1"] - run["cpu0"]) / wall,
    }


def main() -> None:
    parser = job_arguments(__doc__.splitlines()[0], rounds=1)
    parser.add_argument("--tree", help="a source tree to run instead of the installed one")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    prefix = tempfile.mkdtemp(prefix="sb_lanes_") + "/timeline"
    # The app's environment is this one's (minus SPEECHBATCH_*): the probe rides in it.
    os.environ["SB_LANES_PROBE"] = prefix
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PROBE), args.tree, os.environ.get("PYTHONPATH")) if p
    )
    names: list[str] = []
    with (
        fake_provider_process(args.latency) as provider,
        gunicorn_app(provider.url, workers=1, threads=4, ITEM_CONCURRENCY=args.concurrency) as app,
    ):
        texts = [f"warm up item {n}" for n in range(args.items)]
        one_job(app, texts, watched=False)
        names.append("warm-up")
        for i in range(args.rounds):
            for name in ("unwatched", "watched"):
                texts = [f"lanes {name} round {i} item {n}" for n in range(args.items)]
                one_job(app, texts, watched=name == "watched")
                names.append(name)
    (path,) = glob.glob(prefix + "-*.json")  # the one worker's
    runs = split_runs(json.loads(Path(path).read_text()))
    results = [
        {"job": job_id, "case": name, **breakdown(run, args.latency)}
        for name, (job_id, run) in zip(names, sorted(runs.items()), strict=True)
    ]
    ideal = args.items * args.latency / args.concurrency
    print_table(
        f"Where the run's time goes: {args.items} items x {args.latency * 1000:g} ms, "
        f"{args.concurrency} lanes (ideal {ideal:g} s); ms of the mean lane",
        [
            "case",
            "wall",
            "first send",
            "calls beyond latency",
            "gaps",
            "end",
            "efficiency",
            "gap p50/p90",
            "worker CPU",
        ],
        [
            [
                r["case"],
                round(r["wall_ms"]),
                round(r["parts_ms"]["first_send"], 1),
                round(r["parts_ms"]["calls_beyond_latency"], 1),
                round(r["parts_ms"]["gaps"], 1),
                round(r["parts_ms"]["end"], 1),
                round(ideal * 1000 / r["wall_ms"], 3),
                f"{r['gap_ms'].get('p50', 0):.1f} / {r['gap_ms'].get('p90', 0):.1f}",
                f"{r['worker_cpu_cores']:.2f}",
            ]
            for r in results
        ],
    )
    for r in results:
        print(
            f"{r['case']}: first sends {r['first_send_ms']} ms; last answers "
            f"{r['last_answer_ms'][0]}-{r['last_answer_ms'][-1]} ms"
        )
    write_results("lanes", {"params": vars(args), "jobs": results})


if __name__ == "__main__":
    main()
