"""Render memory and speed: a render's peak memory does not grow with the job.

For each job size (default 50 and 500 items of 3 s of real MP3 audio each; the issue's
size is ``--sizes 50 5000 --item-seconds 2.2``, 3.06 hours of items' audio, a 3.67-hour
file with the gaps, or ``--item-seconds 1.75``, a 3.0-hour file), a fresh
process (``--child N``) builds the app on a fresh PostgreSQL database (``_inprocess``),
makes a COMPLETED job of N items whose audio is written straight into the storage,
measures its resident memory when idle, then renders the job (MP3, loudness -18 LUFS,
chapters every 25 items) through the API while a thread samples the resident memory every
10 ms, and prints its figures as JSON. Each size runs in its own process, so the peaks do
not mix.

Figures: the peak above idle at the largest size minus the one at the smallest, in MB
(target <= 20: the per-item bookkeeping is a few hundred bytes; audio is never held),
the peak above idle at the largest size (target <= 150, the issue's bound), and the
render speed at the largest size, in seconds of audio per second of wall time
(target >= 30, the issue's bar for a 3-hour book).

Usage: python bench/render_memory.py [--sizes 50 500] [--item-seconds 3.0]
[--format mp3|m4b] [--preset acx|podcast|ebu]
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import threading
import time
from typing import Any

import av
import numpy as np
import psutil
from _common import exit_on_sigterm, fake_provider, figure, write_results
from _inprocess import app_in_process
from av.audio.stream import AudioStream
from sqlalchemy import insert, text

from speechbatch.adapters.models import Chapter

RATE = 22050
CHAPTER_EVERY = 25
MEMORY_TARGET_MB = 20.0
PEAK_TARGET_MB = 150.0
SPEED_TARGET = 30.0


def tone_mp3(frequency: float, seconds: float) -> bytes:
    """``seconds`` of a tone whose level moves like speech, as MP3 (LAME through PyAV)."""
    t = np.arange(int(seconds * RATE)) / RATE
    level = 0.1 * (0.6 + 0.4 * np.sin(2 * np.pi * 2.5 * t))
    samples = (level * np.sin(2 * np.pi * frequency * t)).astype(np.float32)
    out = io.BytesIO()
    with av.open(out, mode="w", format="mp3") as container:
        stream = container.add_stream("libmp3lame", rate=RATE, layout="mono")
        assert isinstance(stream, AudioStream)
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = RATE
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return out.getvalue()


def make_finished_job(unit: Any, client: Any, items: int, seconds: float) -> int:
    """A COMPLETED job of ``items`` items, each DONE with one of five tones as its audio."""
    job = unit.call(
        client, "POST", "/api/jobs",
        {"title": "bench book", "voice": "alloy", "items": [f"Item {i}." for i in range(items)]},
        expect=201,
    )  # fmt: skip
    storage = unit.services.storage
    keys = []
    for n in range(5):
        key = f"jobs/{job['id']}/tone-{n}.mp3"
        storage.write(key, tone_mp3(220.0 + 110 * n, seconds))
        keys.append(key)
    chapters = [
        {"job_id": job["id"], "index": c, "title": f"Chapter {c + 1}"}
        for c in range((items + CHAPTER_EVERY - 1) // CHAPTER_EVERY)
    ]
    for chapter in chapters:
        chapter["first_position"] = 1 + chapter["index"] * CHAPTER_EVERY
    with unit.services.uow_factory() as uow:
        for n, key in enumerate(keys):
            uow.session.execute(
                text(
                    "UPDATE items SET status = 'DONE', audio_path = :key "
                    "WHERE job_id = :job AND position % 5 = :n"
                ),
                {"key": key, "job": job["id"], "n": n},
            )
        uow.session.execute(
            text(
                "UPDATE jobs SET status = 'COMPLETED', items_done = :n, items_pending = 0 "
                "WHERE id = :job"
            ),
            {"n": items, "job": job["id"]},
        )
        uow.session.execute(insert(Chapter), chapters)
        uow.commit()
    return int(job["id"])


def child(items: int, fmt: str, seconds: float, preset: str | None) -> dict[str, Any]:
    """Render one job of ``items`` items in this process; its memory and speed."""
    process = psutil.Process()
    with fake_provider(0.0) as provider, app_in_process(provider.url) as unit:
        client = unit.app.test_client()
        job_id = make_finished_job(unit, client, items, seconds)
        idle = process.memory_info().rss
        peak = idle
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, process.memory_info().rss)
                time.sleep(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        began = time.monotonic()
        body: dict[str, Any] = {"format": fmt} | ({"preset": preset} if preset else {})
        render = unit.call(client, "POST", f"/api/jobs/{job_id}/renders", body, expect=202)
        while render["status"] == "RUNNING":
            time.sleep(0.05)
            render = unit.call(client, "GET", f"/api/jobs/{job_id}/renders/{render['id']}")
        elapsed = time.monotonic() - began
        done.set()
        sampler.join()
    if render["status"] != "COMPLETED":
        raise RuntimeError(f"render failed: {render}")
    return {
        "items": items,
        "audio_seconds": render["duration_seconds"],
        "wall_seconds": round(elapsed, 2),
        "idle_mb": round(idle / 2**20, 1),
        "peak_above_idle_mb": round((peak - idle) / 2**20, 1),
        "chapters": len(render["chapters"]),
    }


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 500])
    parser.add_argument("--item-seconds", type=float, default=3.0)
    parser.add_argument("--format", choices=["mp3", "m4b"], default="mp3")
    parser.add_argument("--preset", choices=["acx", "podcast", "ebu"], default=None)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run = child(args.child, args.format, args.item_seconds, args.preset)
        print(json.dumps(run), flush=True)
        return
    runs = []
    for size in args.sizes:
        out = subprocess.run(
            [
                sys.executable, __file__, "--child", str(size), "--format", args.format,
                "--item-seconds", str(args.item_seconds),
                *(["--preset", args.preset] if args.preset else []),
            ],
            capture_output=True, text=True, check=True, timeout=1800,
        ).stdout  # fmt: skip
        run = json.loads(out.strip().splitlines()[-1])
        speed = run["audio_seconds"] / run["wall_seconds"]
        print(
            f"{size:5d} items: {run['audio_seconds'] / 60:6.1f} min of audio in "
            f"{run['wall_seconds']:6.1f} s ({speed:5.1f}x real time), idle "
            f"{run['idle_mb']} MB, peak +{run['peak_above_idle_mb']} MB",
            flush=True,
        )
        runs.append(run)
    growth = runs[-1]["peak_above_idle_mb"] - runs[0]["peak_above_idle_mb"]
    speed = runs[-1]["audio_seconds"] / runs[-1]["wall_seconds"]
    peak = runs[-1]["peak_above_idle_mb"]
    figures = {
        "peak_growth_mb": figure(
            f"render peak above idle, {runs[-1]['items']} items minus {runs[0]['items']} (MB)",
            growth, f"<= {MEMORY_TARGET_MB:g}", growth <= MEMORY_TARGET_MB,
        ),
        "peak_mb": figure(
            f"render peak above idle at {runs[-1]['items']} items (MB)",
            peak, f"<= {PEAK_TARGET_MB:g}", peak <= PEAK_TARGET_MB,
        ),
        "speed": figure(
            f"render speed at {runs[-1]['items']} items (x real time)",
            speed, f">= {SPEED_TARGET:g}", speed >= SPEED_TARGET,
        ),
    }  # fmt: skip
    name = f"render_memory_{args.format}" + (f"_{args.preset}" if args.preset else "")
    write_results(name, {"runs": runs, "figures": figures})


if __name__ == "__main__":
    main()
