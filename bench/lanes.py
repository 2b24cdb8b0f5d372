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

With ``--gaps`` the probe also stamps the audio file's write, the runner's transactions,
their statements and commits, and the mean gap between two calls of a lane is split into
those parts; the rest of a gap is the lane's Python and its turns for the GIL.

Usage: python bench/lanes.py [--rounds 1] [--items 96] [--latency 0.1] [--concurrency 8]
                             [--tree PATH/src]   (another source tree, e.g. a patched copy)
                             [--gaps]
"""

from __future__ import annotations

import glob
import itertools
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import median, percentile, print_table, write_results
from _http import fake_provider_process, gunicorn_app
from watched import job_arguments, one_job

PROBE = Path(__file__).resolve().parent / "lanes_probe"


def split_runs(events: list[list[Any]]) -> dict[int, dict[str, Any]]:
    """The probe's events, per job: start/end (clock and CPU), each lane's calls, and
    every thread's events in order (for ``gap_parts``)."""
    runs: dict[int, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    sent: dict[str, float] = {}
    for at, kind, thread, details in events:
        if kind == "run_start":
            current = runs[details["job"]] = {
                "start": at,
                "cpu0": details["cpu"],
                "lanes": {},
                "threads": {},
            }
        elif kind == "run_end":
            runs[details["job"]].update(end=at, cpu1=details["cpu"])
        elif current is None:
            continue
        elif kind == "send":
            sent[thread] = at
        elif kind == "answer" and thread in sent:
            current["lanes"].setdefault(thread, []).append((sent.pop(thread), at))
        if current is not None:
            current["threads"].setdefault(thread, []).append((at, kind))
    return runs


# What a lane does between two calls, by the probe's consecutive stamps (with --gaps);
# every other stretch of a gap is the lane's own Python and its turns for the GIL.
GAP_PARTS = {
    ("write", "written"): "audio file",
    ("sql", "sql_end"): "statements",
    ("commit", "tx_end"): "commit",
}


def gap_parts(run: dict[str, Any]) -> dict[str, float]:
    """The mean gap between two calls of a lane, split into ``GAP_PARTS`` (ms)."""
    totals = dict.fromkeys([*GAP_PARTS.values(), "Python"], 0.0)
    gaps = 0
    for thread in run["lanes"]:
        stretch: list[tuple[float, str]] = []
        for at, kind in run["threads"][thread]:
            if kind == "answer":
                stretch = [(at, kind)]
            elif stretch and kind == "send":
                gaps += 1
                stretch.append((at, kind))
                for (a, first), (b, second) in itertools.pairwise(stretch):
                    totals[GAP_PARTS.get((first, second), "Python")] += b - a
                stretch = []
            elif stretch:
                stretch.append((at, kind))
    return {k: v / gaps * 1000 for k, v in totals.items()} if gaps else {}


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
    parser.add_argument(
        "--gaps", action="store_true", help="also split the gaps (audio, statements, commit)"
    )
    args = parser.parse_args()
    logging.disable(logging.INFO)
    prefix = tempfile.mkdtemp(prefix="sb_lanes_") + "/timeline"
    # The app's environment is this one's (minus SPEECHBATCH_*): the probe rides in it.
    os.environ["SB_LANES_PROBE"] = prefix
    if args.gaps:
        os.environ["SB_LANES_GAPS"] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PROBE), args.tree, os.environ.get("PYTHONPATH")) if p
    )
    names: list[str] = []
    with (
        fake_provider_process(args.latency) as provider,
        gunicorn_app(provider.url, workers=1, threads=4, ITEM_CONCURRENCY=args.concurrency) as app,
    ):
        wait_for_probe(prefix)
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
        {
            "job": job_id,
            "case": name,
            **breakdown(run, args.latency),
            **({"gap_parts_ms": gap_parts(run)} if args.gaps else {}),
        }
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
    if args.gaps:
        print_table(
            "The mean gap between two calls of a lane, ms",
            ["case", *results[0]["gap_parts_ms"]],
            [[r["case"], *(round(v, 2) for v in r["gap_parts_ms"].values())] for r in results],
        )
    write_results("lanes", {"params": vars(args), "jobs": results})


def wait_for_probe(prefix: str, timeout: float = 30.0) -> None:
    """Wait until the worker's probe is in place: a run started before it is not seen."""
    deadline = time.monotonic() + timeout
    while not glob.glob(prefix + "-ready-*"):
        if time.monotonic() > deadline:
            raise SystemExit("the probe did not load in the gunicorn worker")
        time.sleep(0.05)


if __name__ == "__main__":
    main()
