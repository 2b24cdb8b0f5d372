"""What a lexicon rule may be written in: RE2 syntax, matched in time linear in the text.

RE2 (the ``google-re2`` binding) refuses every construct that needs backtracking. Its own
error for one ("invalid perl operator: (?<") does not say what was asked for, so the
constructs of Python's and PCRE's syntax that it lacks are named here first, and each
compiled pattern is kept small (a bound on the work per character: RE2 falls back from
its DFA to a simulation whose cost grows with the program's size).
"""

from __future__ import annotations

from typing import Any

import re2

# RE2 instructions of one regex rule, and of every regex rule of a lexicon together:
# when a rule's DFA runs out of memory, RE2 falls back to a simulation whose cost per
# byte grows with the program's size.
MAX_PROGRAM = 500
MAX_PROGRAMS = 5_000
# Memory for the DFAs of a lexicon's regex rules, shared out between them (a few rules
# get room enough never to fall back; a thousand get the floor each, which simple
# patterns never fill), and for the set of every rule that finds which can match.
LEXICON_MEMORY = 8 * 1024 * 1024
RULE_MEMORY_FLOOR = 64 * 1024
SET_MEMORY = 8 * 1024 * 1024

# ``(?`` followed by these: constructs with no linear-time matching.
_GROUPS = (
    ("(?<=", "a lookbehind (?<=…)"),
    ("(?<!", "a negative lookbehind (?<!…)"),
    ("(?=", "a lookahead (?=…)"),
    ("(?!", "a negative lookahead (?!…)"),
    ("(?>", "an atomic group (?>…)"),
    ("(?P=", "a backreference (?P=name)"),
    ("(?P>", "a subroutine call (?P>name)"),
    ("(?&", "a subroutine call (?&name)"),
    ("(?R", "a recursion (?R)"),
    ("(?(", "a conditional (?(…)…)"),
    ("(?|", "a branch reset (?|…)"),
)
# ``\`` followed by these, outside a character class.
_ESCAPES = {
    **{d: f"a backreference \\{d}" for d in "123456789"},
    "g": "a backreference or subroutine call \\g",
    "k": "a backreference \\k<name>",
    "G": "\\G (where the last match ended)",
    "K": "\\K (reset the match start)",
    "Z": "\\Z (write \\z for the end of the text)",
    "C": "\\C (any byte, which can split a character)",
}


# What RE2 raises (a pattern it cannot compile, a set it cannot match).
Error = re2.error


class UnsupportedConstruct(ValueError):
    """A pattern uses a construct RE2 cannot match in linear time; the message names it."""


def unsupported(pattern: str) -> str | None:
    """The first construct of ``pattern`` that RE2 cannot run in linear time, in words
    (None: none), found by a scan that skips escapes and character classes."""
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            named = _ESCAPES.get(pattern[i + 1 : i + 2])
            if named is not None and not in_class:
                return named
            i += 2
        elif in_class:
            in_class = c != "]"
            i += 1
        elif c == "[":
            i += 1
            i += pattern[i : i + 1] == "^"
            i += pattern[i : i + 1] == "]"  # a "]" first in a class is a literal
            in_class = True
        elif c == "(" and pattern[i + 1 : i + 2] == "?":
            found = _group(pattern, i)
            if found is not None:
                return found
            i += 1
        elif c in "*+?}" and pattern[i + 1 : i + 2] == "+":
            return f"a possessive quantifier {c}+"
        else:
            i += 1
    return None


def _group(pattern: str, i: int) -> str | None:
    for opening, name in _GROUPS:
        if pattern.startswith(opening, i):
            return name
    following = pattern[i + 2 : i + 3]
    if following.isdigit() or (following in "+-" and pattern[i + 3 : i + 4].isdigit()):
        return "a recursion (?N)"
    return None


def rule_memory(regex_rules: int) -> int:
    """The DFA memory of each of ``regex_rules`` regex rules of one lexicon."""
    return max(RULE_MEMORY_FLOOR, LEXICON_MEMORY // max(1, regex_rules))


def options(*, case_sensitive: bool, memory: int) -> Any:
    """RE2's options for a rule: UTF-8, no capture groups (only where a match is),
    bounded memory, and no log line when a DFA runs out of it (RE2 then goes on)."""
    opts = re2.Options()
    opts.case_sensitive = case_sensitive
    opts.never_capture = True
    opts.max_mem = memory
    opts.log_errors = False
    return opts


def compile_pattern(pattern: str, *, case_sensitive: bool, memory: int) -> Any:
    """``pattern`` compiled by RE2 with ``memory`` bytes at most; UnsupportedConstruct
    names a construct it lacks, ValueError says why it does not compile (RE2's words)."""
    construct = unsupported(pattern)
    if construct is not None:
        raise UnsupportedConstruct(construct)
    try:
        return re2.compile(pattern, options(case_sensitive=case_sensitive, memory=memory))
    except Error as exc:
        raise ValueError(_words(exc)) from None


def _words(exc: Exception) -> str:
    """RE2's error message as text (the binding gives bytes)."""
    message = exc.args[0] if exc.args else ""
    if isinstance(message, bytes):
        message = message.decode(errors="replace")
    if "pattern too large" in str(message):
        return f"it is too complex ({message}): use fewer or smaller repetitions"
    return str(message) or "RE2 cannot compile it"


def escape(literal: str) -> str:
    """A pattern that matches ``literal`` as written."""
    return str(re2.escape(literal))


class Prefilter:
    """One RE2 set of every rule's pattern (case folded inline where asked): a single
    scan of a text says which rules may match it."""

    def __init__(self, patterns: list[str]) -> None:
        self._set = re2.Set.SearchSet(options(case_sensitive=True, memory=SET_MEMORY))
        # The empty pattern matches every text: a scan whose answer lacks it failed (the
        # set's DFA ran out of memory, which RE2 answers as "no match"), not "none".
        self._set.Add("")
        for pattern in patterns:
            self._set.Add(pattern)
        self._set.Compile()

    def matching(self, data: bytes) -> set[int] | None:
        """The indexes of the patterns that match ``data`` (None: the scan failed)."""
        found = self._set.Match(data) or ()
        if 0 not in found:
            return None
        return {n - 1 for n in found if n}


def prefilter(patterns: list[str]) -> Prefilter | None:
    """The set of ``patterns``; None when RE2 cannot build it (patterns too big
    together): every rule is then searched on its own."""
    try:
        return Prefilter(patterns)
    except Error:
        return None
