"""Cutting one sentence that is longer than an item: at its clause ends, then at words.

A sentence splitter reads a paragraph of quoted dialogue as one sentence (the quotation
marks hold it together), so a "sentence" longer than an item is first re-read by its own
full stops (``inner_sentences``), and only what is still too long is cut: at the strong
clause ends (``;``, ``:``, dashes) where that suffices, at commas where a clause is still
longer, and at a space between words only where even a comma's clause does not fit. Every
cut falls at a space of the text, so joining the pieces with spaces gives the text back.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

_CLOSERS = "\"'\u201d\u2019)]"
# Marks after which a clause ends; a dash on its own (" - ", " -- ") ends one too.
STRONG_MARKS = ";:\u2014\u2013"
WEAK_MARKS = ","
_DASH_WORDS = ("-", "--", "---")
_FULL_STOP = re.compile(r"(?<=[.!?\u2026])[\"'\u201d\u2019)\]]* (?=\S)")
# Words ending in a full stop that do not end a sentence.
_ABBREVIATIONS = frozenset(
    ["mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "rev", "capt", "col", "gen", "lt",
     "sgt", "messrs", "mme", "mlle", "no", "vs", "etc", "viz", "e.g", "i.e", "cf", "ch", "vol",
     "pp", "fig", "esq", "hon"]
)  # fmt: skip


def inner_sentences(text: str) -> list[str]:
    """``text`` (squeezed) cut after each full stop, ``!``, ``?`` or ellipsis (and its
    closing quotes) that a capital, a digit or an opening quote follows, except after a
    known abbreviation or an initial: a quotation's sentences, which a splitter keeps as one."""
    found, start = [], 0
    for match in _FULL_STOP.finditer(text):
        follower = text[match.end()]
        if follower.islower():
            continue  # '"Yes!" said he': the quotation goes on as one sentence
        word = text[start : match.start()].rsplit(" ", 1)[-1].lstrip(_CLOSERS + "(\u201c\u2018")
        core = word.rstrip(".").lower()
        if word.endswith(".") and (core in _ABBREVIATIONS or (len(core) == 1 and core.isalpha())):
            continue
        found.append(text[start : match.end() - 1])
        start = match.end()
    return [*found, text[start:]] if start < len(text) else found


def clause_pieces(sentence: str, max_chars: int) -> list[str]:
    """A sentence in pieces of at most ``max_chars``, cut at clause ends first (strong,
    then commas) and between words only where a clause is still longer."""
    return _cut(sentence, max_chars, (STRONG_MARKS, WEAK_MARKS))


def _ends_clause(word: str, marks: str) -> bool:
    core = word.rstrip(_CLOSERS)
    if marks == STRONG_MARKS and core in _DASH_WORDS:
        return True
    return bool(core) and core[-1] in marks


def _clauses(text: str, marks: str) -> list[str]:
    """``text`` cut after every word that ends a clause with one of ``marks``."""
    parts: list[str] = []
    words: list[str] = []
    for word in text.split(" "):
        words.append(word)
        if _ends_clause(word, marks):
            parts.append(" ".join(words))
            words = []
    if words:
        parts.append(" ".join(words))
    return parts


def _cut(text: str, max_chars: int, levels: Sequence[str]) -> list[str]:
    if len(text) <= max_chars:
        return [text]
    if not levels:
        return list(word_chunks(text, max_chars))
    pieces = [p for part in _clauses(text, levels[0]) for p in _cut(part, max_chars, levels[1:])]
    return merge(pieces, max_chars)


def merge(pieces: Sequence[str], max_chars: int) -> list[str]:
    """Consecutive pieces joined by spaces while they fit in ``max_chars``."""
    merged: list[str] = []
    for piece in pieces:
        if merged and len(merged[-1]) + 1 + len(piece) <= max_chars:
            merged[-1] += " " + piece
        else:
            merged.append(piece)
    return merged


def word_chunks(sentence: str, max_chars: int) -> Iterator[str]:
    """A clause longer than ``max_chars`` in chunks cut at spaces."""
    chunk = ""
    for word in sentence.split(" "):
        while len(word) > max_chars:  # no space to cut at: the only cut inside a word
            if chunk:
                yield chunk
                chunk = ""
            yield word[:max_chars]
            word = word[max_chars:]
        if not chunk:
            chunk = word
        elif len(chunk) + 1 + len(word) <= max_chars:
            chunk += " " + word
        else:
            yield chunk
            chunk = word
    if chunk:
        yield chunk
