"""Read-along spans: the CPU to wrap every sentence of one long plain-text paragraph.

A read-along made from an imported EPUB puts a span around each sentence of the book's own
pages (``adapters/epub_spans``, through ``read_along_pages.sync_pages``). A book set without
paragraph breaks has one text node of thousands of sentences. Each round builds a page of
one ``<p>`` of ``--sentences`` sentences (items of 100 sentences, about 3,600 characters,
under an item's 4,096) in a fresh process and reads the CPU seconds of ``sync_pages``
alone (CPU, not wall time: on a shared machine wall time swings with the load). The
figure is the median; the target is at most 1 s for 16,000 sentences.

``--compare SRC`` alternates each round with the same probe on another ``src`` folder
(e.g. an older commit's, from ``git archive``) put first on ``PYTHONPATH``: an A/B in the
same minutes.

Usage: python bench/wrap_speed.py [--rounds 3] [--sentences 16000] [--compare /tmp/old/src]
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

from _common import ROOT, VENV_BIN, alternated, alternated_results, exit_on_sigterm, write_results

TARGET_CPU_SECONDS = 1.0
ITEM_SENTENCES = 100
PROBE = """
import sys, time
from speechbatch.adapters.epub_spans import XHTML
from speechbatch.adapters.read_along_pages import parse_page, sync_pages
from speechbatch.domain.read_along import BookChapter, Passage
from speechbatch.domain.renders import Cue

count, per_item = int(sys.argv[1]), int(sys.argv[2])
text = [f"Sentence number {n} of the one paragraph ends here." for n in range(count)]
body = "<p>" + " ".join(text) + "</p>"
page = parse_page("one.xhtml", f"<html xmlns='{XHTML}'><body>{body}</body></html>".encode(), "t")
passages = []
for n, at in enumerate(range(0, count, per_item)):
    pieces = text[at : at + per_item]
    cues = tuple(Cue(float(k), float(k + 1), piece) for k, piece in enumerate(pieces))
    passages.append(Passage(n + 1, Cue(0.0, float(len(pieces)), " ".join(pieces)), cues))
began = time.process_time()
placed, _ = sync_pages([page], [BookChapter("One", passages)])
seconds = time.process_time() - began
assert len(placed) == count, len(placed)
print(seconds)
"""


def wrap_once(src: Path | None, sentences: int) -> float:
    """CPU seconds of one ``sync_pages`` of the paragraph, in a fresh process."""
    env = None if src is None else {**os.environ, "PYTHONPATH": str(src)}
    probe = [str(VENV_BIN / "python"), "-c", PROBE, str(sentences), str(ITEM_SENTENCES)]
    return float(subprocess.check_output(probe, cwd=ROOT, env=env, text=True).split()[-1])


def main() -> None:
    """Measure the rounds, print the figure, write bench/results/wrap_speed.json."""
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=16_000)
    parser.add_argument("--compare", type=Path, default=None)
    args = parser.parse_args()
    found = alternated(
        args.rounds, lambda src: wrap_once(src, args.sentences), args.compare, "CPU-s"
    )
    data = alternated_results(found, vars(args), "wrap_cpu_seconds", TARGET_CPU_SECONDS)
    write_results("wrap_speed", data)


if __name__ == "__main__":
    main()
