"""Captions that are subtitles: an item's text cut into cues a viewer can read.

A cue lasts at most ``MAX_SECONDS`` and shows at most two lines of at most
``LINE_CHARS`` characters. A cue never spans two sentences; a sentence too long for one
cue is cut at its clause ends (, ; : and dashes) first, nearest its middle, and at a word
only where a clause is still too long. Each cue is timed from the take's timing: from its
first word's start where words are timed, else by its place in its sentence's span.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from speechbatch.domain.documents import squeeze
from speechbatch.domain.renders import Cue
from speechbatch.domain.timing import Span, Timing, sentences_of

MAX_SECONDS = 7.0
LINE_CHARS = 42
MAX_LINES = 2
# A clause ends after a word ending in one of these, or at a dash standing alone.
_CLAUSE_MARKS = ",;:\u2014\u2013"
_DASHES = ("-", "\u2014", "\u2013", "--")


@dataclass(frozen=True)
class _Piece:
    """A run of a sentence's words: ``first`` and ``last`` index its words."""

    words: tuple[str, ...]
    first: int
    start: float
    end: float

    @property
    def text(self) -> str:
        return " ".join(self.words)


def wrap(text: str) -> list[str] | None:
    """``text`` on at most two lines of at most LINE_CHARS, as even as they can be
    (None when it does not fit)."""
    if len(text) <= LINE_CHARS:
        return [text]
    best: list[str] | None = None
    for cut in (m.start() for m in re.finditer(" ", text)):
        lines = [text[:cut], text[cut + 1 :]]
        if max(map(len, lines)) <= LINE_CHARS and (
            best is None or max(map(len, lines)) < max(map(len, best))
        ):
            best = lines
    return best


def item_cues(text: str, timing: Timing | None, start: float, end: float) -> list[Cue]:
    """The cues of one item whose audio lies from ``start`` to ``end`` in the file."""
    spans = _sentence_spans(text, timing, end - start)
    words = _words_by_sentence(spans, timing)
    cues: list[Cue] = []
    for span, timed in zip(spans, words, strict=True):
        for piece in _cut(_first_piece(span, timed), timed, span):
            cue_start = round(start + piece.start, 3)
            cue_end = round(min(start + piece.end, cue_start + MAX_SECONDS, end), 3)
            cues.append(Cue(cue_start, max(cue_end, cue_start), "\n".join(wrap(piece.text) or [])))
    return _ordered(cues)


def item_pieces(text: str, timing: Timing | None, start: float, end: float) -> list[Cue]:
    """The item's words, each with where it is heard in the file, when the timing has the
    text's words; else its sentences (timed as its captions are): what a read-along book
    highlights one at a time."""
    spans = _sentence_spans(text, timing, end - start)
    words = _words_by_sentence(spans, timing)
    if spans and all(timed is not None for timed in words):
        return [
            Cue(round(start + w.start, 3), round(start + w.end, 3), word)
            for span, timed in zip(spans, words, strict=True)
            for word, w in zip(span.text.split(), timed or (), strict=True)
        ]
    return [Cue(round(start + s.start, 3), round(start + s.end, 3), s.text) for s in spans]


def _ordered(cues: list[Cue]) -> list[Cue]:
    """Starts never go back and a cue ends by the time the next one starts."""
    out: list[Cue] = []
    for cue in cues:
        begin = max(cue.start, out[-1].start if out else 0.0)
        if out and out[-1].end > begin:
            out[-1] = Cue(out[-1].start, begin, out[-1].text)
        out.append(Cue(begin, max(cue.end, begin), cue.text))
    return out


def _sentence_spans(text: str, timing: Timing | None, duration: float) -> list[Span]:
    """The item's sentences with their times: the timing's when its sentences are the
    text's (or as many), else the whole item shared in proportion to their lengths."""
    texts = sentences_of(text)
    if timing is not None and len(timing.sentences) == len(texts):
        return [Span(t, s.start, s.end) for t, s in zip(texts, timing.sentences, strict=True)]
    total = sum(len(t) for t in texts) or 1
    spans, at = [], 0
    for t in texts:
        spans.append(Span(t, duration * at / total, duration * (at + len(t)) / total))
        at += len(t)
    return spans


def _words_by_sentence(spans: list[Span], timing: Timing | None) -> list[tuple[Span, ...] | None]:
    """Each sentence's timed words, when the timing's words are the text's words."""
    words = timing.words if timing is not None else None
    if words is None or [w.text for w in words] != [w for s in spans for w in s.text.split()]:
        return [None] * len(spans)
    found: list[tuple[Span, ...] | None] = []
    at = 0
    for span in spans:
        count = len(span.text.split())
        found.append(tuple(words[at : at + count]))
        at += count
    return found


def _first_piece(span: Span, timed: tuple[Span, ...] | None) -> _Piece:
    return _piece(tuple(_split_long(squeeze(span.text).split())), 0, span, timed)


def _split_long(words: list[str]) -> list[str]:
    """A word longer than a line (a URL, say) is shown in line-long parts."""
    out: list[str] = []
    for word in words:
        out += [word[i : i + LINE_CHARS] for i in range(0, len(word), LINE_CHARS)] or [word]
    return out


def _piece(
    words: tuple[str, ...], first: int, span: Span, timed: tuple[Span, ...] | None
) -> _Piece:
    """The words from index ``first`` of the sentence, timed."""
    last = first + len(words) - 1
    if timed is not None and len(timed) == len(span.text.split()):
        owner = _owners(span)  # a part of a long word is timed as its word
        return _Piece(words, first, timed[owner[first]].start, timed[owner[last]].end)
    total = len(" ".join(_all_words(span))) or 1
    before = len(" ".join(_all_words(span)[:first])) + (1 if first else 0)
    length = len(" ".join(words))
    seconds = span.end - span.start
    return _Piece(words, first, span.start + seconds * before / total,
                  span.start + seconds * min(before + length, total) / total)  # fmt: skip


def _all_words(span: Span) -> list[str]:
    return _split_long(squeeze(span.text).split())


def _owners(span: Span) -> list[int]:
    """For each of the span's shown words, the index of the text's word it is (part of)."""
    return [i for i, word in enumerate(span.text.split()) for _ in _split_long([word])]


def _cut(piece: _Piece, timed: tuple[Span, ...] | None, span: Span) -> list[_Piece]:
    """The piece as one cue when it fits, else cut at a clause end near its middle (at
    a word where it has none) and each half cut again."""
    fits = wrap(piece.text) is not None and piece.end - piece.start <= MAX_SECONDS
    if fits or len(piece.words) == 1:
        return [piece]
    at = _cut_at(piece.words)
    left = _piece(piece.words[:at], piece.first, span, timed)
    right = _piece(piece.words[at:], piece.first + at, span, timed)
    return _cut(left, timed, span) + _cut(right, timed, span)


def _cut_at(words: Sequence[str]) -> int:
    """Where to cut these words (an index in 1..len-1): after the clause end nearest the
    middle in characters, else at the word nearest it."""
    ends: list[int] = []
    chars: list[int] = []
    at = 0
    for i, word in enumerate(words[:-1], start=1):
        at += len(word) + 1
        chars.append(at)
        nxt = words[i]
        if word[-1:] in _CLAUSE_MARKS or nxt in _DASHES or word in _DASHES:
            ends.append(i)
    middle = (at + len(words[-1])) / 2
    candidates = ends or list(range(1, len(words)))
    # A clause end is taken only when it leaves no tiny stub (a third of the piece).
    balanced = [i for i in candidates if middle / 1.5 <= chars[i - 1] <= middle * 1.5 + 1]
    candidates = list(range(1, len(words))) if ends and not balanced else balanced or candidates
    return min(candidates, key=lambda i: abs(chars[i - 1] - middle))
