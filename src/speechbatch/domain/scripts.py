"""A script cut into items: one item per line, said by the speaker the line names.

A line that reads ``NAME: text`` is NAME's (a name of at most four words, starting with a
letter); every other line is narration, spoken with the job's own voice. In Markdown a
heading of level 1 or 2 opens a chapter (the heading is its first item) and a name in
bold or italics (``**NAME:** text``, ``*NAME*: text``) names a speaker too. A line too
long for one item is cut at its sentences (then at words), every piece the same speaker's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from speechbatch.domain.cast import CastError, clean_speaker
from speechbatch.domain.documents import SplitChapter, line_pieces, squeeze

_HEADING = re.compile(r"^ {0,3}#{1,2}[ \t]+(?P<title>.*?)(?:[ \t]+#+)?[ \t]*$")
_SPEAKER_LINE = re.compile(r"^(?P<name>[^\W\d_][\w'\u2019.\- ]{0,49}?)[ \t]*:[ \t]*(?P<text>\S.*)$")
_EMPHASIZED = re.compile(r"^(?P<mark>\*{1,2}|_{1,2})(?P<inside>[^*_]+?)(?P=mark)(?P<rest>.*)$")
MAX_NAME_WORDS = 4


@dataclass(frozen=True)
class ScriptItem:
    """One item of a script: its text, its chapter's index and who says it (None: the
    narrator)."""

    text: str
    chapter: int
    speaker: str | None


@dataclass(frozen=True)
class Script:
    """What a script import makes: items in reading order and their chapters."""

    items: tuple[ScriptItem, ...]
    chapters: tuple[SplitChapter, ...]


def script_line(line: str, markdown: bool = False) -> tuple[str | None, str]:
    """``(speaker, text)`` of one line: the speaker it names, or None for narration."""
    text = line.strip()
    emphasized = _EMPHASIZED.match(text) if markdown else None
    if emphasized is not None:
        inside, rest = emphasized["inside"], emphasized["rest"]
        if inside.rstrip().endswith(":") or rest.lstrip().startswith(":"):
            text = inside + rest
    said = _SPEAKER_LINE.match(text)
    if said is None or len(said["name"].split()) > MAX_NAME_WORDS:
        return None, text
    try:
        return clean_speaker(said["name"]), said["text"].strip()
    except CastError:
        return None, text


def _lines(text: str, markdown: bool) -> Iterator[tuple[bool, str | None, str]]:
    """``(is a heading, speaker, text)`` of each line that has text, in order."""
    for raw in text.splitlines():
        heading = _HEADING.match(raw) if markdown else None
        if heading is not None and squeeze(heading["title"]):
            yield True, None, squeeze(heading["title"])
            continue
        speaker, said = script_line(raw, markdown)
        if said:
            yield False, speaker, said


def split_script(text: str, max_chars: int, *, markdown: bool, title: str) -> Script:
    """Cut a script's text into items of at most ``max_chars`` characters, one line (or
    its pieces) each, with their speakers; ``title`` names a chapter before any heading."""
    lines = list(_lines(text, markdown))
    items: list[ScriptItem] = []
    chapters: list[SplitChapter] = []
    pieces = line_pieces((said for _h, _s, said in lines), max_chars)
    for (heading, speaker, said), cut in zip(lines, pieces, strict=True):
        if heading or not chapters:
            chapters.append(SplitChapter(len(chapters), said if heading else title, len(items) + 1))
        items.extend(ScriptItem(piece, chapters[-1].index, speaker) for piece in cut)
    return Script(tuple(items), tuple(chapters))
