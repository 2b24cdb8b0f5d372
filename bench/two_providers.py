"""Issue 44: two providers at once, each under its own limit, both kept full.

The app in this process on PostgreSQL with ``SPEECHBATCH_TTS_PROVIDERS=elevenlabs,google``,
ElevenLabs limited to 4 calls at once and Google to 2 (``SPEECHBATCH_{PROVIDER}_CONCURRENCY``),
both answered by the test suite's local stand-in (``tests/support/paid_providers.py``) after
LATENCY (2 s, a realistic call). Per round, JOBS jobs are clicked at once; each is a cast of
two characters, Alice on ElevenLabs and Bob on Google, their lines interleaved (two of
Alice's to one of Bob's, texts of their own: nothing is reused), so that each provider's
ideal time is the same: calls x LATENCY / its limit. Efficiency of a provider = ideal /
actual, actual from the clicks to that provider's last answer (the stand-in's timeline).
A warm-up round of a few lines comes first and is not counted. Target: each provider's
median efficiency >= 0.9. The stand-in also checks that neither ever had more calls in
flight than its own limit.

    .venv/bin/python bench/two_providers.py [--rounds 2] [--jobs 2] [--alice 20] [--latency 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from _common import ROOT, exit_on_sigterm, figure, median, write_results
from _inprocess import InProcess, app_in_process

sys.path.insert(0, str(ROOT))
from tests.support.paid_providers import KEY, PaidProviders

LIMITS = {"elevenlabs": 4, "google": 2}
KINDS = {"elevenlabs": "with-timestamps", "google": "text:synthesize"}
CAST = {"Alice": "elevenlabs:21m00Tcm4TlvDq8rCL9Xx", "Bob": "google:en-US-Neural2-C"}
TARGET = 0.9


def _lines(label: str, alice: int) -> list[dict[str, str]]:
    """Two of Alice's lines to one of Bob's, each text its own."""
    lines = []
    for n in range(alice):
        lines.append({"text": f"{label}: Alice's line {n}.", "speaker": "Alice"})
        if n % 2 == 1:
            lines.append({"text": f"{label}: Bob's line {n // 2}.", "speaker": "Bob"})
    return lines


def one_round(app: InProcess, server: PaidProviders, label: str, jobs: int, alice: int,
              latency: float) -> dict[str, Any]:  # fmt: skip
    """Click ``jobs`` cast jobs at once; each provider's calls, ideal and actual seconds."""
    with app.app.test_client() as client:
        ids = []
        for j in range(jobs):
            body = {"title": f"{label} {j}", "voice": CAST["Alice"], "cast": CAST,
                    "items": _lines(f"{label} job {j}", alice)}  # fmt: skip
            ids.append(app.call(client, "POST", "/api/jobs", body, expect=201)["id"])
        with server.lock:
            server.timeline.clear()
            server.most_in_flight.clear()
        clicked = time.monotonic()
        for job_id in ids:
            app.call(client, "POST", f"/api/jobs/{job_id}/generate", expect=202)
        deadline = clicked + 600
        while time.monotonic() < deadline:
            states = [app.call(client, "GET", f"/api/jobs/{i}?items=none")["status"] for i in ids]
            if all(s != "GENERATING" and s != "PENDING" for s in states):
                break
            time.sleep(0.5)
        if any(s != "COMPLETED" for s in states):
            raise RuntimeError(f"{label}: jobs ended {states}")
    with server.lock:
        timeline, most = list(server.timeline), dict(server.most_in_flight)
    result: dict[str, Any] = {}
    for name, kind in KINDS.items():
        calls = [(start, end) for k, start, end in timeline if k == kind]
        ideal = len(calls) * latency / LIMITS[name]
        actual = max(end for _, end in calls) - clicked
        result[name] = {
            "calls": len(calls), "ideal": round(ideal, 3), "actual": round(actual, 3),
            "efficiency": round(ideal / actual, 4), "most_in_flight": most.get(kind, 0),
            # From the clicks to its first call: the claims, the plans, the first begins.
            "head": round(min(start for start, _ in calls) - clicked, 3),
        }  # fmt: skip
        if most.get(kind, 0) > LIMITS[name]:
            raise RuntimeError(f"{name}: {most[kind]} calls in flight, over its {LIMITS[name]}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--alice", type=int, default=20, help="Alice's lines per job")
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per call")
    args = parser.parse_args()
    exit_on_sigterm()
    server = PaidProviders().start()
    server.latency = args.latency
    settings = {
        "TTS_PROVIDER": "elevenlabs", "TTS_PROVIDERS": "elevenlabs,google",
        "ELEVENLABS_API_KEY": KEY, "ELEVENLABS_BASE_URL": server.url,
        "GOOGLE_API_KEY": KEY, "GOOGLE_BASE_URL": server.url,
        "PROVIDER_CONCURRENCY": 8,
        **{f"{name.upper()}_CONCURRENCY": limit for name, limit in LIMITS.items()},
    }  # fmt: skip
    rounds: list[dict[str, Any]] = []
    try:
        with app_in_process(server.url, **settings) as app:
            one_round(app, server, "warm-up", args.jobs, 4, args.latency)
            for n in range(args.rounds):
                result = one_round(app, server, f"round {n + 1}", args.jobs, args.alice,
                                   args.latency)  # fmt: skip
                rounds.append(result)
                print(f"round {n + 1}: " + ", ".join(
                    f"{name} {r['calls']} calls, ideal {r['ideal']:.1f} s, actual "
                    f"{r['actual']:.1f} s (first call at {r['head']:.2f} s), "
                    f"efficiency {r['efficiency']:.3f}, "
                    f"at most {r['most_in_flight']} in flight"
                    for name, r in result.items()), flush=True)  # fmt: skip
    finally:
        server.stop()
    figures = {}
    for name in KINDS:
        value = median([r[name]["efficiency"] for r in rounds])
        figures[name] = figure(f"efficiency_{name}", value, f">= {TARGET}", value >= TARGET)
    write_results(
        "two_providers",
        {"parameters": vars(args), "limits": LIMITS, "rounds": rounds, "figures": figures},
    )


if __name__ == "__main__":
    main()
