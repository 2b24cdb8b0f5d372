"""Paragraph pauses: where a render cuts an item's audio so that its paragraph breaks are heard.

An item's text keeps a blank line between its paragraphs, but a voice reads them as one
run of sentences. A render finds each break in the take's timing (between the last word,
or sentence, of one paragraph and the first of the next) and replaces the audio between
them with ``paragraph_gap_ms`` of silence: a ``Splice``. Whatever the render times from
the take (captions, the read-along's sentences) goes through ``spliced_timing`` so that it
moves with the audio. Pure arithmetic over seconds and sample counts, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from speechbatch.domain.documents import squeeze
from speechbatch.domain.timing import Span, Timing, sentences_of

DEFAULT_PARAGRAPH_GAP_MS = 700
PARAGRAPH_GAP_MS_MAX = 5000
# A blank line, whatever whitespace it holds, separates two paragraphs.
_BREAK = re.compile(r"\n[^\S\n]*\n\s*")


@dataclass(frozen=True)
class Splice:
    """The take's samples from ``start`` to ``end`` replaced by ``silence`` silent samples."""

    start: int
    end: int
    silence: int

    @property
    def shift(self) -> int:
        """How many samples later everything after it is heard."""
        return self.silence - (self.end - self.start)


def paragraphs_of(text: str) -> list[str]:
    """The item's paragraphs (squeezed), in order; none blank."""
    return [p for p in (squeeze(part) for part in _BREAK.split(text)) if p]


def paragraph_breaks(text: str, timing: Timing | None) -> list[tuple[float, float]]:
    """For each paragraph break of ``text`` that the timing can place: (where the last
    word or sentence before it ends, where the first after it starts), in seconds of the
    take's audio. By words when the timing's words are as many as the text's, else by
    sentences when each paragraph's sentences line up with the timing's; a break that
    falls inside a timed sentence is not placed (its audio is left as it is)."""
    paragraphs = paragraphs_of(text)
    if timing is None or len(paragraphs) < 2:
        return []
    counts = [len(p.split()) for p in paragraphs]
    if timing.words is not None and len(timing.words) == sum(counts):
        return _between(timing.words, _running(counts))
    per_paragraph = [len(sentences_of(p)) for p in paragraphs]
    if sum(per_paragraph) == len(timing.sentences):
        return _between(timing.sentences, _running(per_paragraph))
    # The timing's own sentences (a provider's): a break where one of them ends.
    sentence_words = [len(s.text.split()) for s in timing.sentences]
    if sum(sentence_words) != sum(counts):
        return []
    after = {words: index + 1 for index, words in enumerate(_running([*sentence_words, 0]))}
    return _between(timing.sentences, [after[w] for w in _running(counts) if w in after])


def _running(counts: Sequence[int]) -> list[int]:
    """The running totals before each paragraph but the first (where the breaks fall)."""
    totals, at = [], 0
    for count in counts[:-1]:
        at += count
        totals.append(at)
    return totals


def _between(spans: Sequence[Span], breaks: Sequence[int]) -> list[tuple[float, float]]:
    """(end of span ``b - 1``, start of span ``b``) for each break index ``b``."""
    return [(spans[b - 1].end, spans[b].start) for b in breaks if 0 < b < len(spans)]


def paragraph_splices(
    text: str, timing: Timing | None, gap_ms: int, rate: int
) -> tuple[Splice, ...]:
    """The splices that make each placed paragraph break ``gap_ms`` of silence: the audio
    between the two spans goes (where spans overlap, nothing goes and the silence goes in
    between them)."""
    silence = rate * gap_ms // 1000
    found: list[Splice] = []
    for end, start in paragraph_breaks(text, timing):
        cut_from = round(min(end, start) * rate)
        cut_to = round(max(end, start) * rate) if start > end else cut_from
        if found and cut_from < found[-1].end:  # timing out of order: leave this one
            continue
        found.append(Splice(cut_from, cut_to, silence))
    return tuple(found)


def spliced_seconds(seconds: float, splices: Sequence[Splice], rate: int, *, start: bool) -> float:
    """Where a moment of the take's audio is heard once ``splices`` are made. A moment at
    a cut, or inside a removed stretch, is heard where the silence ends when it starts a
    span (``start``), else where the silence begins."""
    at = round(seconds * rate)
    moved = 0
    for splice in splices:
        if at < splice.start or (at == splice.start and not start):
            break
        if at >= splice.end and (at > splice.start or start):
            moved += splice.shift
            continue
        return round((splice.start + moved + (splice.silence if start else 0)) / rate, 3)
    return round((at + moved) / rate, 3)


def spliced_timing(timing: Timing | None, splices: Sequence[Splice], rate: int) -> Timing | None:
    """The take's timing moved as the audio is by ``splices``."""
    if timing is None or not splices:
        return timing

    def moved(spans: Sequence[Span]) -> tuple[Span, ...]:
        return tuple(
            Span(
                s.text,
                spliced_seconds(s.start, splices, rate, start=True),
                spliced_seconds(s.end, splices, rate, start=False),
            )
            for s in spans
        )

    return Timing(moved(timing.sentences), None if timing.words is None else moved(timing.words))


def spliced_length(samples: int, splices: Sequence[Splice]) -> int:
    """The item's length in samples once ``splices`` are made to its ``samples``."""
    return samples + sum(s.silence - (min(s.end, samples) - min(s.start, samples)) for s in splices)
