"""Caption cue starts against speech onsets (issue 43): an espeak job of prose (the quick
start's offline voice; its takes timed from their audio: English words by forced
alignment), rendered to MP3, its SubRip cues compared with the onsets of speech found in
the decoded render (sound after at least 0.1 s of quiet), each cue with the nearest one.

The figure: the share of cues that start within 150 ms of their speech (target 95%), with
the median and 95th percentile of the offsets. PostgreSQL, the app in this process.

    .venv/bin/python bench/caption_timing.py [--copies 4] [--provider espeak|piper]

Also the cost of timing the takes: each item's audio timed again here, in one thread
(what the runner spends on it after each call), in CPU seconds and wall seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from _common import ROOT, exit_on_sigterm, figure, write_results
from _inprocess import app_in_process

sys.path.insert(0, str(ROOT))
from tests.support.caption_timing import PROSE, TOLERANCE, cue_offsets, summary
from tests.support.render_audio import parse_cues


def _wait(check: Any, what: str, timeout: float = 600.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def _timing_cost(app: Any, client: Any, jobs: str, voice: str) -> tuple[float, float]:
    """CPU seconds of this thread and wall seconds to time every item's audio again, one
    after another (on a loaded machine the wall time is mostly waiting for a core)."""
    from speechbatch.adapters.audio.timing import measure_timing

    headers = {"Authorization": f"Bearer {app.token}"}
    cpu = wall = 0.0
    for item in app.call(client, "GET", f"{jobs}/items?limit=1000")["items"]:
        audio = client.get(item["audio_url"], headers=headers).get_data()
        began, began_cpu = time.monotonic(), time.thread_time()
        measure_timing(audio, item["text"], voice)
        cpu += time.thread_time() - began_cpu
        wall += time.monotonic() - began
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4, help="times the prose is repeated")
    parser.add_argument("--provider", choices=("espeak", "piper"), default="espeak")
    parser.add_argument("--voice", help="default: en-us (espeak), en_US-joe-medium (piper)")
    args = parser.parse_args()
    args.voice = args.voice or ("en-us" if args.provider == "espeak" else "en_US-joe-medium")
    exit_on_sigterm()
    items = PROSE * args.copies
    with app_in_process("http://127.0.0.1:9/v1", TTS_PROVIDER=args.provider) as app:
        client = app.app.test_client()
        body = {"title": "Captions", "voice": args.voice, "items": items}
        job = app.call(client, "POST", "/api/jobs", body, expect=201)
        jobs = f"/api/jobs/{job['id']}"
        began = time.monotonic()
        app.call(client, "POST", f"{jobs}/generate", expect=202)
        _wait(lambda: app.call(client, "GET", jobs)["status"] == "COMPLETED", "the job")
        generated = time.monotonic() - began
        render = app.call(client, "POST", f"{jobs}/renders", {"format": "mp3"}, expect=202)
        path = f"{jobs}/renders/{render['id']}"
        done = _wait(
            lambda: (r := app.call(client, "GET", path))["status"] != "RUNNING" and r, "the render"
        )
        headers = {"Authorization": f"Bearer {app.token}"}
        audio = client.get(done["download_url"], headers=headers).get_data()
        srt = client.get(done["captions"]["srt"], headers=headers).get_data().decode()
        cpu, wall = _timing_cost(app, client, jobs, args.voice)
    offsets = cue_offsets(audio, srt)
    for offset, (start, _, text) in zip(offsets, parse_cues(srt), strict=True):
        mark = "" if abs(offset) <= TOLERANCE else "   <-- off"
        print(f"{start:8.3f} {offset * 1000:+7.0f} ms  {text.replace(chr(10), ' / ')[:70]}{mark}")
    figures = summary(offsets)
    seconds = done["duration_seconds"]
    print(f"{len(items)} items, {figures['cues']} cues, {seconds:.1f} s of audio; "
          f"generated in {generated:.1f} s")  # fmt: skip
    within = figures["within"]
    results = {
        "C1": figure("caption starts within 150 ms of speech", within, ">= 0.95", within >= 0.95),
        "median_ms": round(figures["median"] * 1000, 1),
        "p95_ms": round(figures["p95"] * 1000, 1),
    }
    results["timing_cpu_seconds"], results["timing_wall_seconds"] = round(cpu, 2), round(wall, 2)
    results["generate_seconds"] = round(generated, 2)
    print(f"median {results['median_ms']} ms, 95th percentile {results['p95_ms']} ms")
    print(f"timing the takes again: {cpu:.2f} CPU seconds ({wall:.2f} s wall, one thread) for "
          f"{seconds:.1f} s of audio, beside {generated:.2f} s to generate the job")  # fmt: skip
    offsets_ms = [round(o * 1000, 1) for o in offsets]
    write_results(
        f"caption_timing_{args.provider}",
        {"parameters": vars(args), "figures": results, "offsets_ms": offsets_ms},
    )


if __name__ == "__main__":
    main()
