"""A 100,000-character book to a finished M4B with captions, with the offline voice (issue 43).

The server is started as ``bin/quickstart`` starts it (``gunicorn wsgi:app -w 2 --threads 4``,
a fresh SQLite file, ``SPEECHBATCH_TTS_PROVIDER=piper``, the bundled ``en_US-joe-medium``
voice), then a user's path through the API, each phase timed from this client:

- import: ``POST /api/jobs/import`` of a Markdown book (``# `` headings are its chapters);
- generate: ``POST …/generate`` until the job is COMPLETED (read every second; the voices
  load in the first seconds, as they do for a newcomer);
- render: ``POST …/renders`` ``{"format": "m4b"}`` until the render is COMPLETED;
- download: the M4B and its WebVTT and SubRip captions.

The book is the public-domain chapters in ``tests/fixtures/prose`` taken in turn until it
holds ``--characters`` of prose. Copies after the first have each paragraph's sentences
shuffled and the paragraphs rotated, so that no item's text repeats an earlier one (a repeat
would reuse that item's audio instead of speaking it; the figure counts reused items, and
should show 0). The M4B is decoded with PyAV: its duration must be > 0 and its chapters the
book's. The load average is printed at the start and the end, and its range in between.

    .venv/bin/python bench/book.py [--characters 100000]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import av
from _common import ROOT, cli, exit_on_sigterm, figure, write_results
from _http import Api, Gunicorn

VOICE = "en_US-joe-medium"
PROSE = ROOT / "tests" / "fixtures" / "prose"
TIMEOUT_S = 3 * 3600
# A book's worth of speech "in minutes": under an hour, import to download.
TARGET_S = 3600.0
ADMIN = ("book@bench.test", "book-bench-pw-1")
# A sentence ends at . ! or ? (a closing quote may follow) before a space.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'\u201d\u2019])\s+")
ABBREVIATION = re.compile(r"\b(Mr|Mrs|Dr|St)\.$")


def sentences(paragraph: str) -> list[str]:
    """The paragraph's sentences (not cut after Mr., Mrs., Dr. or St.)."""
    found: list[str] = []
    for piece in SENTENCE_END.split(paragraph):
        if found and ABBREVIATION.search(found[-1]):
            found[-1] += " " + piece
        else:
            found.append(piece)
    return found


def book(characters: int) -> tuple[str, int]:
    """Markdown of chapters of prose until ``characters`` of it; the chapters' count."""
    sources = []
    for path in sorted(PROSE.glob("*.txt")):
        heading, *paragraphs = path.read_text().strip().split("\n\n")
        sources.append((heading.strip(), [p.strip() for p in paragraphs]))
    rng = random.Random(43)
    parts: list[str] = []
    size = chapter = 0
    while size < characters:
        heading, paragraphs = sources[chapter % len(sources)]
        copy = chapter // len(sources)
        if copy:
            shuffled = [rng.sample(s, len(s)) for s in map(sentences, paragraphs)]
            turn = copy % len(paragraphs)
            paragraphs = [" ".join(s) for s in shuffled[turn:] + shuffled[:turn]]
        chapter += 1
        parts.append(f"# Part {chapter}: {heading}\n\n" + "\n\n".join(paragraphs))
        size += sum(len(p) for p in paragraphs)
    return "\n\n".join(parts) + "\n", chapter


class LoadWatch(threading.Thread):
    """The 1-minute load average every 10 s while the book is made."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen = [os.getloadavg()[0]]
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(10):
            self.seen.append(os.getloadavg()[0])


def wait_for(read: Any, done: Any, what: str) -> tuple[Any, float]:
    """Read every second until ``done(answer)``; the answer and the seconds waited."""
    began = time.monotonic()
    while not done(answer := read()):
        if answer.get("status") == "FAILED" or time.monotonic() - began > TIMEOUT_S:
            raise RuntimeError(f"{what}: {answer.get('status')} {answer.get('error_message')}")
        time.sleep(1.0)
    return answer, time.monotonic() - began


def make_book(api: Api, markdown: str, folder: Path) -> dict[str, Any]:
    """Import, generate, render and download the book; each phase's seconds and what it made."""
    seconds: dict[str, float] = {}
    began = time.monotonic()
    with api.session() as session:
        answer = session.post(
            f"{api.base_url}/api/jobs/import",
            data={"voice": VOICE, "title": "A Bench Book"},
            files={"file": ("book.md", markdown.encode(), "text/markdown")},
            timeout=300,
        )
    if answer.status_code != 201:
        raise RuntimeError(f"import: {answer.status_code} {answer.text[:500]}")
    job = answer.json()
    jobs = f"/api/jobs/{job['id']}"
    seconds["import"] = time.monotonic() - began
    api.call("POST", f"{jobs}/generate", expect=202)
    job, seconds["generate"] = wait_for(
        lambda: api.call("GET", jobs), lambda j: j["status"] == "COMPLETED", "the job"
    )
    render = api.call("POST", f"{jobs}/renders", {"format": "m4b"}, expect=202)
    path = f"{jobs}/renders/{render['id']}"
    render, seconds["render"] = wait_for(
        lambda: api.call("GET", path), lambda r: r["status"] == "COMPLETED", "the render"
    )
    began = time.monotonic()
    files = {"m4b": render["download_url"], **render["captions"]}
    with api.session() as session:
        for kind, url in files.items():
            with session.get(api.base_url + url, stream=True, timeout=300) as download:
                download.raise_for_status()
                with (folder / f"book.{kind}").open("wb") as out:
                    for block in download.iter_content(1 << 20):
                        out.write(block)
    seconds["download"] = time.monotonic() - began
    items: list[dict[str, Any]] = []
    while page := api.call("GET", f"{jobs}/items?limit=1000&offset={len(items)}")["items"]:
        items += page
    return {"seconds": seconds, "job": job, "render": render, "items": items}


def check_m4b(path: Path) -> tuple[float, int]:
    """The M4B's decoded seconds of audio and its chapters, read back with PyAV."""
    with av.open(str(path)) as container:
        chapters = len(container.chapters())
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        return samples / stream.rate, chapters


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--characters", type=int, default=100_000)
    args = parser.parse_args()
    markdown, chapters = book(args.characters)
    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.1f} {load_start[1]:.1f} {load_start[2]:.1f}")
    watch = LoadWatch()
    with tempfile.TemporaryDirectory(prefix="sb_book_") as tmp:
        folder = Path(tmp)
        (folder / "prometheus").mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPEECHBATCH_")}
        env.update(
            SPEECHBATCH_DATABASE_URL=f"sqlite:///{tmp}/speechbatch.db",
            SPEECHBATCH_SECRET_KEY="book-bench",
            SPEECHBATCH_TTS_PROVIDER="piper",
            SPEECHBATCH_STORAGE_DIR=f"{tmp}/audio",
            PROMETHEUS_MULTIPROC_DIR=f"{tmp}/prometheus",
        )
        cli(env, "db", "upgrade")
        cli(env, "create-admin", "--org", "demo", "--email", ADMIN[0], "--password", ADMIN[1])
        token = cli(env, "create-token", "--email", ADMIN[0]).strip().splitlines()[-1]
        server = Gunicorn(env, folder, workers=2, threads=4)
        try:
            server.wait_ready()
            watch.start()
            made = make_book(Api(server.base_url, token), markdown, folder)
        finally:
            watch.stop.set()
            server.stop()
        decoded, found_chapters = check_m4b(folder / "book.m4b")
        sizes = {kind: (folder / f"book.{kind}").stat().st_size for kind in ("m4b", "vtt", "srt")}
        cues = (folder / "book.srt").read_text().count(" --> ")
    report(args, made, chapters, decoded, found_chapters, sizes, cues, load_start, watch.seen)


def report(
    args: argparse.Namespace, made: dict[str, Any], chapters: int, decoded: float,
    found_chapters: int, sizes: dict[str, int], cues: int,
    load_start: tuple[float, float, float], loads: list[float],
) -> None:  # fmt: skip
    """Print the phases and the totals, check the file, and write the results."""
    seconds, items, render = made["seconds"], made["items"], made["render"]
    total = sum(seconds.values())
    characters = sum(len(item["text"]) for item in items)
    reused = sum(item["reused"] for item in items)
    audio = float(render["duration_seconds"])
    assert len(items) == made["job"]["progress"]["total"], "not every item was read"
    assert decoded > 0, "the M4B decodes to no audio"
    assert found_chapters == chapters, f"the M4B has {found_chapters} chapters, not {chapters}"
    assert cues > 0 and sizes["vtt"] > 0, "the captions are empty"
    for phase, spent in seconds.items():
        print(f"{phase:>9}: {spent:8.1f} s ({spent / total:.1%})")
    load_end = os.getloadavg()
    print(
        f"{characters:,} characters in {len(items)} items ({reused} reused), {chapters} chapters; "
        f"{audio / 60:.1f} minutes of audio (decoded {decoded / 60:.1f}), {cues} cues; "
        f"M4B {sizes['m4b'] / 1e6:.1f} MB\n"
        f"real-time factor: generate {seconds['generate'] / audio:.3f}, "
        f"import to download {total / audio:.3f} (wall seconds per second of audio)\n"
        f"load average at end: {load_end[0]:.1f} {load_end[1]:.1f} {load_end[2]:.1f}; "
        f"1-minute load during the run {min(loads):.1f}-{max(loads):.1f}"
    )
    result = figure(
        "a 100,000-character book, import to downloaded M4B with captions (minutes)",
        total / 60, f"<= {TARGET_S / 60:g}", total <= TARGET_S,
    )  # fmt: skip
    write_results("book", {
        "parameters": vars(args),
        "phases_seconds": {k: round(v, 2) for k, v in seconds.items()},
        "characters": characters, "items": len(items), "reused_items": reused,
        "chapters": chapters, "audio_seconds": round(audio, 2),
        "decoded_seconds": round(decoded, 2), "cues": cues, "bytes": sizes,
        "real_time_factor_generate": round(seconds["generate"] / audio, 4),
        "real_time_factor_total": round(total / audio, 4),
        "load_start": load_start, "load_end": load_end,
        "load_1m_range": [min(loads), max(loads)], "figures": {"book_minutes": result},
    })  # fmt: skip


if __name__ == "__main__":
    main()
