"""A cast: who speaks a line (its speaker) and which voice a speaker has in a job."""

from __future__ import annotations

from collections.abc import Mapping

from speechbatch.domain.limits import MAX_SPEAKER
from speechbatch.domain.text import has_visible, text_problem


class CastError(ValueError):
    """A speaker's name or a cast that cannot be taken; the message says why."""


def clean_speaker(value: object) -> str:
    """A speaker's name, trimmed: 1 to MAX_SPEAKER characters of text with a visible one."""
    if not isinstance(value, str):
        raise CastError("a speaker is a name (text)")
    name = value.strip()
    if not name or not has_visible(name):
        raise CastError("a speaker's name needs a visible character")
    if len(name) > MAX_SPEAKER:
        raise CastError(f"a speaker's name is at most {MAX_SPEAKER} characters")
    problem = text_problem(name)
    if problem is not None:
        raise CastError(f"a speaker's name {problem}")
    return name


def voice_of(speaker: str | None, cast: Mapping[str, str], narrator: str) -> str:
    """The voice a line of ``speaker`` is spoken with: its voice in ``cast``, else the
    job's own (the narrator's)."""
    if speaker is None:
        return narrator
    return cast.get(speaker, narrator)


def changed_speakers(
    before: Mapping[str, str], after: Mapping[str, str], narrator: str
) -> list[str]:
    """The speakers whose lines would be spoken with another voice after a cast change."""
    names = sorted(set(before) | set(after))
    return [s for s in names if voice_of(s, before, narrator) != voice_of(s, after, narrator)]
