"""Issue 29: what measuring an item's audio at its finish costs on the provider-bound figure.

The ``slow`` figure of ``bench/throughput.py`` (4 jobs x 40 items, 0.5 s calls, 8 slots,
``gunicorn -w 2 --threads 4`` on PostgreSQL, each job polled 5 times a second), with a fake
provider that answers real MP3 (``--seconds`` of a tone, 24 kHz mono, 48 kbit/s, so the
finish decodes what it would in production). Two deployments run side by side, each on its
own database: A is the product (every DONE finish decodes and measures the audio), B serves
``bench/wsgi_unmeasured.py`` (the same app with the measurement left out). Rounds alternate
A, B, B, A, ... so that the machine's load falls on both; efficiency = ideal / actual as in
throughput.py. Figure: median efficiency of B / median efficiency of A - 1, the share of the
finish's time that measuring adds; target <= 5%. Beside it, what the load cannot blur: the
median time of one ``measure_audio`` of that MP3 in this process (200 times), against the
call's latency.

Usage: python bench/measure_cost.py [--rounds 6] [--seconds 3] [--items 40] [--latency 0.5]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any

from _common import exit_on_sigterm, fake_provider, figure, median, write_results
from _http import Deployment, deployment
from fake_tts import tone_mp3
from throughput import SLOTS, one_round

from speechbatch.runner.measure import measure_audio

JOBS = 4


def one_measurement_seconds(seconds: float, times: int = 200) -> float:
    """The median time of measuring one answer of ``seconds`` in this process."""
    audio = tone_mp3(seconds)
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        measured = measure_audio(audio, "round 1 job 0 item 12", {})
        spent.append(time.perf_counter() - started)
    assert measured.duration_seconds is not None and measured.suspect is None
    return median(spent)


SIDES = {"measured": "wsgi:app", "unmeasured": "wsgi_unmeasured:app"}


def newest(app: Deployment) -> int:
    """The id of the deployment's newest job."""
    return int(app.api.call("GET", "/api/jobs?per_page=1")["jobs"][0]["id"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds per side")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each answer")
    parser.add_argument("--items", type=int, default=40, help="items per job")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per call")
    args = parser.parse_args()
    exit_on_sigterm()
    ideal = JOBS * args.items * args.latency / SLOTS
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    with fake_provider(args.latency, "mp3") as provider, contextlib.ExitStack() as stack:
        apps = {
            side: stack.enter_context(
                deployment(provider.url, workers=2, app=module, PROVIDER_CONCURRENCY=SLOTS)
            )
            for side, module in SIDES.items()
        }
        for side, app in apps.items():
            one_round(app, f"warm-up {side}", JOBS, 8, 5.0)
        for n in range(args.rounds):
            order = list(SIDES) if n % 2 == 0 else list(reversed(SIDES))
            for side in order:
                result = one_round(apps[side], f"round {n + 1} {side}", JOBS, args.items, 5.0)
                result["efficiency"] = ideal / result["seconds"]
                results[side].append(result)
                print(
                    f"round {n + 1} {side}: {result['seconds']:.3f} s, "
                    f"efficiency {result['efficiency']:.3f}, jobs per worker "
                    f"{result['jobs_per_worker']}",
                    flush=True,
                )
        durations = {
            side: {
                item["duration_seconds"]
                for item in app.api.call("GET", f"/api/jobs/{newest(app)}")["items"]
            }
            for side, app in apps.items()
        }
    print(f"durations recorded on the last job of each side: {durations}")
    if None in durations["measured"] or durations["unmeasured"] != {None}:
        raise SystemExit("the measured side must measure every item and the other none")
    efficiency = {side: median([r["efficiency"] for r in rs]) for side, rs in results.items()}
    added = efficiency["unmeasured"] / efficiency["measured"] - 1
    print(f"median efficiency: {efficiency}")
    one = one_measurement_seconds(args.seconds)
    print(f"one measurement: {one * 1000:.2f} ms, {one / args.latency:.2%} of a call's latency")
    record = figure("measuring adds to a DONE item's finish (provider-bound)", added, "<= 0.05",
                    added <= 0.05)  # fmt: skip
    write_results(
        "measure_cost",
        {
            "params": {**vars(args), "jobs": JOBS, "slots": SLOTS, "ideal_seconds": ideal},
            "rounds": results,
            "median_efficiency": efficiency,
            "one_measurement_seconds": one,
            "figure": record,
        },
    )


if __name__ == "__main__":
    main()
