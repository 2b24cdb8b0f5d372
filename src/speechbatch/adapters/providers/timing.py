"""Timing that providers give, turned into sentence and word spans.

A text is cut into sentences (up to and including ``.``, ``!`` or ``?``, or the end) and
words (runs of non-space characters). ElevenLabs times every character: a span starts
with its first character's start and ends with its last one's end. Google and Polly time
marks that stand before each sentence and word: a word ends where the next word of its
sentence starts, a sentence (and its last word) where the next sentence starts, the last
one at the end of the audio.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from speechbatch.adapters.providers.base import Span

_SENTENCE = re.compile(r"[^.!?]*[^\s.!?][^.!?]*(?:[.!?]+|$)|[.!?]+")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Token:
    """A sentence or a word: its text and where it is in the text (``start``, ``end``)."""

    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Sentence:
    """A sentence and its words."""

    token: Token
    words: tuple[Token, ...]


def sentences_of(text: str) -> tuple[Sentence, ...]:
    """The sentences of ``text`` with their words, in order."""
    found: list[Sentence] = []
    for match in _SENTENCE.finditer(text):
        raw = match.group()
        lead = len(raw) - len(raw.lstrip())
        body = raw.strip()
        if not body:
            continue
        start = match.start() + lead
        words = tuple(
            Token(w.group(), start + w.start(), start + w.end()) for w in _WORD.finditer(body)
        )
        found.append(Sentence(Token(body, start, start + len(body)), words))
    return tuple(found)


def _span(text: str, start: float, end: float) -> Span:
    return {"text": text, "start_seconds": round(start, 3), "end_seconds": round(end, 3)}


def from_characters(
    characters: Sequence[str], starts: Sequence[float], ends: Sequence[float]
) -> tuple[tuple[Span, ...], tuple[Span, ...]]:
    """(sentences, words) from a timing per character (ElevenLabs' ``alignment``)."""
    if not characters or not (len(characters) == len(starts) == len(ends)):
        return (), ()
    # A "character" may be longer than one (a grapheme): map string offsets to indexes.
    index: list[int] = []
    for n, character in enumerate(characters):
        index.extend([n] * len(character))
    text = "".join(characters)
    sentences: list[Span] = []
    words: list[Span] = []
    for sentence in sentences_of(text):
        first, last = index[sentence.token.start], index[sentence.token.end - 1]
        sentences.append(_span(sentence.token.text, starts[first], ends[last]))
        for word in sentence.words:
            a, b = index[word.start], index[word.end - 1]
            words.append(_span(word.text, starts[a], ends[b]))
    return tuple(sentences), tuple(words)


def from_marks(
    sentences: Sequence[Sentence],
    sentence_starts: Mapping[int, float],
    word_starts: Mapping[tuple[int, int], float],
    duration: float | None,
) -> tuple[tuple[Span, ...], tuple[Span, ...] | None]:
    """(sentences, words) from the times of marks before each sentence (``n``) and word
    (``(n, w)``); words are None when no word was timed. A sentence without a time
    starts where the previous one ended."""
    bounds: list[float] = []
    last = 0.0
    for n in range(len(sentences)):
        last = max(last, sentence_starts.get(n, word_starts.get((n, 0), last)))
        bounds.append(last)
    end_of_all = max(duration or 0.0, bounds[-1] if bounds else 0.0, *word_starts.values(), 0.0)
    bounds.append(end_of_all)
    spans = tuple(_span(s.token.text, bounds[n], bounds[n + 1]) for n, s in enumerate(sentences))
    if not word_starts:
        return spans, None
    words: list[Span] = []
    for n, sentence in enumerate(sentences):
        times = [word_starts.get((n, w)) for w in range(len(sentence.words))]
        for w, word in enumerate(sentence.words):
            start = times[w] if times[w] is not None else bounds[n]
            later = [t for t in times[w + 1 :] if t is not None]
            end = later[0] if later else bounds[n + 1]
            words.append(_span(word.text, start or 0.0, max(end, start or 0.0)))
    return spans, tuple(words)


def mp3_seconds(audio: bytes) -> float | None:
    """The duration of MP3 ``audio``, or None when it cannot be read."""
    from mutagen import MutagenError
    from mutagen.mp3 import MP3

    try:
        info = MP3(io.BytesIO(audio)).info
    except (MutagenError, ValueError, OSError):
        return None
    return None if info is None else float(info.length)
