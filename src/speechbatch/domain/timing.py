"""A take's timing: where each sentence (and word, where known) of its text is spoken.

Pure arithmetic over spans in seconds of the take's own audio. Timing comes from the
provider where it gives some, else from the audio (``adapters/audio/timing.py``): words
by forced alignment, or stretches of speech between silences, which this module matches
to the text's sentences by their lengths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speechbatch.domain.documents import sentences, squeeze

WORD = "word"
SENTENCE = "sentence"
# A silence this long inside a stretch of speech counts as a pause between sentences
# only when nothing longer is near the place the text's lengths predict.
_PAUSE_WEIGHT = 0.5


@dataclass(frozen=True)
class Span:
    """A piece of text and where its speech starts and ends (seconds in the audio)."""

    text: str
    start: float
    end: float

    def as_json(self) -> dict[str, Any]:
        """The API's and the store's shape of a span."""
        return {"text": self.text, "start_seconds": self.start, "end_seconds": self.end}


@dataclass(frozen=True)
class Timing:
    """A take's sentences always, its words when they are known (one per word of its text)."""

    sentences: tuple[Span, ...]
    words: tuple[Span, ...] | None = None

    @property
    def level(self) -> str:
        """``word`` when words are timed, else ``sentence``."""
        return WORD if self.words is not None else SENTENCE

    def as_json(self) -> dict[str, Any]:
        """The API's and the store's shape of a take's timing."""
        return {
            "level": self.level,
            "sentences": [s.as_json() for s in self.sentences],
            "words": None if self.words is None else [w.as_json() for w in self.words],
        }


def _spans(raw: Any) -> tuple[Span, ...]:
    return tuple(
        Span(str(s["text"]), round(float(s["start_seconds"]), 3), round(float(s["end_seconds"]), 3))
        for s in raw
    )


def timing_from_json(data: Mapping[str, Any] | None) -> Timing | None:
    """A stored timing read back (None for none, or for what is not a timing)."""
    if not data:
        return None
    try:
        words = data.get("words")
        return Timing(_spans(data["sentences"]), None if words is None else _spans(words))
    except (KeyError, TypeError, ValueError):
        return None


def provided_timing(spans: Sequence[Mapping[str, Any]], text: str) -> Timing | None:
    """Timing from a provider's spans: words when they are the text's words, else sentences."""
    try:
        given = _spans(spans)
    except (KeyError, TypeError, ValueError):
        return None
    if not given:
        return None
    if [s.text for s in given] == text.split():
        return Timing(sentences_from_words(sentences_of(text), given), given)
    return Timing(given)


def sentences_of(text: str) -> list[str]:
    """The text's sentences, as timing and captions cut it (whitespace squeezed)."""
    squeezed = squeeze(text)
    return sentences(squeezed) if squeezed else []


def sentences_from_words(texts: Sequence[str], words: Sequence[Span]) -> tuple[Span, ...]:
    """Each sentence from its first word's start to its last word's end; ``words`` are
    the text's words in order (``texts`` joined, split at whitespace)."""
    found: list[Span] = []
    at = 0
    for text in texts:
        count = len(text.split())
        mine = words[at : at + count]
        at += count
        if not mine:
            continue
        found.append(Span(text, mine[0].start, mine[-1].end))
    return tuple(found)


def sentences_from_speech(
    texts: Sequence[str], speech: Sequence[tuple[float, float]]
) -> tuple[Span, ...]:
    """Match the sentences to stretches of speech (start, end) between silences.

    The sentence boundaries go to the silences whose places (in speaking time) are
    nearest where the sentences' lengths in characters put them, longer silences
    preferred, in order (a dynamic programme over boundaries and silences). With fewer
    silences than boundaries, the speech is shared in proportion to the lengths.
    """
    if not texts:
        return ()
    if not speech:
        return tuple(Span(t, 0.0, 0.0) for t in texts)
    cuts = _cuts(texts, speech)
    if cuts is None:
        return _proportional(texts, speech)
    starts = [0, *(c + 1 for c in cuts)]
    ends = [*cuts, len(speech) - 1]
    return tuple(
        Span(text, round(speech[s][0], 3), round(speech[e][1], 3))
        for text, s, e in zip(texts, starts, ends, strict=True)
    )


def _cuts(texts: Sequence[str], speech: Sequence[tuple[float, float]]) -> list[int] | None:
    """For each boundary between sentences, the index of the stretch it follows."""
    boundaries, gaps = len(texts) - 1, len(speech) - 1
    if boundaries == 0:
        return []
    if gaps < boundaries:
        return None
    lengths = [len(t) for t in texts]
    total_chars = sum(lengths) or 1
    spoken = [e - s for s, e in speech]
    total = sum(spoken) or 1.0
    place, acc = [], 0.0  # speaking time before each gap
    for d in spoken[:-1]:
        acc += d
        place.append(acc / total)
    pause = [(speech[g + 1][0] - speech[g][1]) for g in range(gaps)]
    longest = max(pause) or 1.0
    target, acc_chars = [], 0
    for n in lengths[:-1]:
        acc_chars += n
        target.append(acc_chars / total_chars)
    inf = float("inf")
    cost = [[inf] * gaps for _ in range(boundaries)]
    back = [[-1] * gaps for _ in range(boundaries)]
    for b in range(boundaries):
        best, best_at = (0.0, -1) if b == 0 else (inf, -1)
        for g in range(gaps):
            if b > 0 and g > 0 and cost[b - 1][g - 1] < best:
                best, best_at = cost[b - 1][g - 1], g - 1
            if best == inf:
                continue
            here = abs(place[g] - target[b]) - _PAUSE_WEIGHT * pause[g] / longest / boundaries
            cost[b][g], back[b][g] = best + here, best_at
    last = min(range(gaps), key=lambda g: cost[-1][g])
    if cost[-1][last] == inf:
        return None
    cuts = [last]
    for b in range(boundaries - 1, 0, -1):
        cuts.append(back[b][cuts[-1]])
    return cuts[::-1]


def _proportional(texts: Sequence[str], speech: Sequence[tuple[float, float]]) -> tuple[Span, ...]:
    """Sentences over the speech in proportion to their lengths (silences skipped)."""
    spoken = [e - s for s, e in speech]
    total = sum(spoken)
    lengths = [max(len(t), 1) for t in texts]
    total_chars = sum(lengths)

    def at(fraction: float) -> float:
        left = fraction * total
        for (start, _end), d in zip(speech, spoken, strict=True):
            if left <= d:
                return start + left
            left -= d
        return speech[-1][1]

    found, acc = [], 0
    for text, n in zip(texts, lengths, strict=True):
        start = at(acc / total_chars)
        acc += n
        found.append(Span(text, round(start, 3), round(at(acc / total_chars), 3)))
    return tuple(found)


def language_of(voice: str) -> str | None:
    """The language a voice speaks, when its name says (``en-us``, ``en_US-joe-medium``,
    ``de``), else None (a provider's named voice, which may speak anything)."""
    name = voice.split(":")[-1]
    head = name.split("-")[0].split("_")[0].lower()
    if len(head) == 2 and head.isalpha() and (len(name) == 2 or name[2] in "-_"):
        return head
    return None


def estimated_timing(text: str, duration: float | None) -> Timing:
    """Sentence timing shared over the whole audio in proportion to the sentences'
    lengths: for a take whose timing was never measured (made before timing was kept)."""
    return Timing(_proportional(sentences_of(text), [(0.0, duration or 0.0)]))
