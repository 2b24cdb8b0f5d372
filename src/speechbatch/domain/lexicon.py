"""The pronunciation lexicon: ordered rules that turn an item's text into its spoken text.

A literal rule replaces whole words only ("SQL" never touches "SQLite"); a regex rule is
RE2 syntax, compiled by RE2, which matches in time linear in the text (constructs that
would need backtracking are refused by name: ``lexicon_regex.py``). ``say`` is literal
text (no group references).

The work of one line is bounded without a clock, so the spoken text is a pure function
of (text, rules, limit) that the estimate, a run, the stale pass and a preview all agree
on: each rule is one linear scan of a text that never grows past the item limit (a line
whose text does, after any rule, is too long: never sent nor billed, and the rules stop
there), each regex's program is small, and a line gets at most MAX_REPLACEMENTS
replacements in all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speechbatch.domain import lexicon_regex as engine

MAX_RULES = 1000
MAX_MATCH = 200
MAX_SAY = 1000
# Replacements (and whole-word candidates turned down) in one line, over all its rules:
# a real lexicon makes a handful; this bounds the time a line's rules take.
MAX_REPLACEMENTS = 20_000


class LexiconError(ValueError):
    """A rule that cannot be used; the message names it (1-based) and says why."""


class UnsupportedRegex(LexiconError):
    """A regex rule uses a construct with no linear-time matching; the message names it."""


class Unspeakable(ValueError):
    """A line the rules cannot make a spoken text of within bounds: never sent nor billed."""


class SpokenTextTooLong(Unspeakable):
    """With the rules, the line's text grows past the item limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"with the lexicon's rules this line would be spoken as more than {limit:,} "
            "characters, the limit of one item: shorten the line or the rules' say"
        )
        self.limit = limit


class TooManyReplacements(Unspeakable):
    """The rules replace text in the line more often than a line allows."""

    def __init__(self) -> None:
        super().__init__(
            f"the lexicon's rules replace text in this line more than {MAX_REPLACEMENTS:,} "
            "times: make the rules that match almost everywhere more specific"
        )


@dataclass(frozen=True)
class Rule:
    """One rule as stored and shown."""

    match: str
    say: str
    regex: bool = False
    case_sensitive: bool = False

    def as_json(self) -> dict[str, Any]:
        """The rule as the API shows it."""
        return {
            "match": self.match,
            "say": self.say,
            "regex": self.regex,
            "case_sensitive": self.case_sensitive,
        }


def parse_rules(raw: Any) -> list[Rule]:
    """Rules from a request's ``rules`` (a list of objects), checked: at most 1,000,
    ``match`` 1-200 characters, ``say`` at most 1,000, regexes that RE2 compiles."""
    if not isinstance(raw, list):
        raise LexiconError("rules must be a list")
    if len(raw) > MAX_RULES:
        raise LexiconError(f"at most {MAX_RULES} rules")
    rules = [_one_rule(n, item) for n, item in enumerate(raw, start=1)]
    Lexicon.compile(rules, limit=MAX_SAY)  # every regex checked (the limit plays no part)
    return rules


def _one_rule(n: int, item: Any) -> Rule:
    if not isinstance(item, Mapping):
        raise LexiconError(f"rule {n}: must be an object with match and say")
    unknown = sorted(set(item) - {"match", "say", "regex", "case_sensitive"})
    if unknown:
        raise LexiconError(f"rule {n}: unknown field “{unknown[0]}”")
    match, say = item.get("match"), item.get("say", "")
    if not isinstance(match, str) or not 1 <= len(match) <= MAX_MATCH or not match.strip():
        raise LexiconError(f"rule {n}: match must be 1 to {MAX_MATCH} characters")
    if not isinstance(say, str) or len(say) > MAX_SAY:
        raise LexiconError(f"rule {n}: say must be a text of at most {MAX_SAY:,} characters")
    if "\x00" in match or "\x00" in say:
        raise LexiconError(f"rule {n}: contains a NUL")
    flags = {k: item.get(k, False) for k in ("regex", "case_sensitive")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise LexiconError(f"rule {n}: {key} must be true or false")
    return Rule(match, say, flags["regex"], flags["case_sensitive"])


@dataclass(frozen=True)
class _Compiled:
    """A rule ready to apply to UTF-8 text: its RE2 pattern and its ``say``."""

    pattern: Any
    say: bytes
    whole_words: bool

    def replace(self, data: bytes, budget: int, limit: int) -> tuple[bytes, int]:
        """Every match in ``data`` replaced by ``say``, leftmost first, and the budget
        left; raises SpokenTextTooLong as soon as the result certainly is."""
        pieces: list[bytes] = []
        pos = end = size = 0
        while (found := self.pattern.search(data, pos)) is not None:
            start, stop = found.span()
            budget -= 1
            if budget < 0:
                raise TooManyReplacements()
            if start == stop or (self.whole_words and not _whole_word(data, start, stop)):
                # An empty match replaces nothing; a part of a word is not the word.
                pos = _next_char(data, start)
                continue
            pieces += (data[end:start], self.say)
            size += start - end + len(self.say)
            if size > 4 * limit:  # over the limit in characters, however they encode
                raise SpokenTextTooLong(limit)
            end = pos = stop
        if not pieces:
            return data, budget
        pieces.append(data[end:])
        return b"".join(pieces), budget


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _ascii_word(char: str) -> bool:
    return char.isascii() and _is_word(char)


def _whole_word(data: bytes, start: int, stop: int) -> bool:
    """Whether no word character touches ``data[start:stop]`` on either side."""
    before = start - 1
    while before > 0 and data[before] & 0xC0 == 0x80:  # back to a character's first byte
        before -= 1
    if start > 0 and _is_word(data[before:start].decode()):
        return False
    after = data[stop : stop + 4].decode(errors="ignore")[:1]
    return not (after and _is_word(after))


def _next_char(data: bytes, i: int) -> int:
    """Where the character after the one at ``i`` begins (past the end: ``len + 1``)."""
    i += 1
    while i < len(data) and data[i] & 0xC0 == 0x80:
        i += 1
    return i


def _too_long(data: bytes, limit: int) -> bool:
    # A character is at least one byte: most texts are answered without decoding.
    return len(data) > limit and len(data.decode()) > limit


class Lexicon:
    """Compiled rules of one version, for items of at most ``limit`` characters:
    ``spoken`` gives a line's spoken text."""

    def __init__(
        self, rules: Sequence[Rule], version: int, limit: int, broken: str | None = None
    ) -> None:
        self.rules = tuple(rules)
        self.version = version
        self.limit = limit
        # Why rules stored earlier can no longer be used (then no line can be spoken).
        self.broken = broken
        memory = engine.rule_memory(sum(r.regex for r in rules))
        self._compiled = [] if broken else [_compile(n, r, memory) for n, r in enumerate(rules, 1)]
        programs = sum(c.pattern.programsize for c in self._compiled if not c.whole_words)
        if programs > engine.MAX_PROGRAMS:
            raise LexiconError(
                f"the regex rules are too complex together ({programs:,} RE2 instructions, "
                f"at most {engine.MAX_PROGRAMS:,}): simplify or remove some"
            )
        self._any = engine.prefilter([_inline(r) for r in rules]) if self._compiled else None

    @classmethod
    def compile(cls, rules: Iterable[Rule], version: int = 0, *, limit: int) -> Lexicon:
        """Compile and check rules; LexiconError names the first that cannot be used."""
        return cls(list(rules), version, limit)

    @classmethod
    def stored(cls, rules: Iterable[Rule], version: int, *, limit: int) -> Lexicon:
        """Rules as they were saved: when one can no longer be used (saved before the
        engine refused it), the lexicon is broken and every line unspeakable with it,
        so nothing is sent with a rule left out."""
        rules = list(rules)
        try:
            return cls(rules, version, limit)
        except LexiconError as exc:
            return cls(rules, version, limit, broken=f"the lexicon cannot be used: {exc}")

    def spoken(self, text: str) -> str:
        """The rules applied to ``text`` in order: its spoken text. Unspeakable (its
        message in words) when the text is longer than the limit after any rule, or the
        rules replace too often in it."""
        if self.broken:
            raise Unspeakable(self.broken)
        if len(text) > self.limit:
            raise SpokenTextTooLong(self.limit)
        data = text.encode()
        # One scan of the set says which rules match the text as written; once a rule
        # has changed it, each later rule searches for itself (a scan of one small
        # program is cheaper than scanning the set again after every change).
        maybe = self._matching(data)
        if not maybe:
            return text
        budget = MAX_REPLACEMENTS
        for n, rule in enumerate(self._compiled):
            if maybe is not None and n not in maybe:
                continue
            changed, budget = rule.replace(data, budget, self.limit)
            if changed is not data:
                if _too_long(changed, self.limit):
                    raise SpokenTextTooLong(self.limit)
                data, maybe = changed, None
        return data.decode()

    def _matching(self, data: bytes) -> set[int] | None:
        """The rules that may match ``data`` (None: any may)."""
        if not self._compiled:
            return set()
        return None if self._any is None else self._any.matching(data)


def _compile(n: int, rule: Rule, memory: int) -> _Compiled:
    say = rule.say.encode()
    cs = rule.case_sensitive
    if not rule.regex:  # a literal's DFA is a line of states: the floor is room enough
        floor = engine.RULE_MEMORY_FLOOR
        literal = engine.compile_pattern(_word_pattern(rule.match), case_sensitive=cs, memory=floor)
        return _Compiled(literal, say, True)
    where = f"rule {n} “{rule.match}”"
    try:
        pattern = engine.compile_pattern(rule.match, case_sensitive=cs, memory=memory)
    except engine.UnsupportedConstruct as exc:
        raise UnsupportedRegex(
            f"{where}: {exc} cannot be matched in linear time (RE2 syntax has none)"
        ) from None
    except ValueError as exc:
        raise LexiconError(f"{where}: the regex does not compile: {exc}") from None
    if pattern.programsize > engine.MAX_PROGRAM:
        raise LexiconError(
            f"{where}: the regex is too complex ({pattern.programsize:,} RE2 instructions, "
            f"at most {engine.MAX_PROGRAM:,})"
        )
    if pattern.fullmatch(b"") is not None:
        raise LexiconError(f"{where}: the regex matches empty text")
    return _Compiled(pattern, say, False)


def _word_pattern(literal: str) -> str:
    """A literal's pattern, with RE2's word boundaries where it begins or ends with an
    ASCII word character: RE2's ``\\b`` knows ASCII words only, so it finds the
    candidates (never fewer than whole words) and ``_whole_word`` judges them as whole
    words of any script."""
    before = "\\b" if _ascii_word(literal[0]) else ""
    after = "\\b" if _ascii_word(literal[-1]) else ""
    return f"{before}{engine.escape(literal)}{after}"


def _inline(rule: Rule) -> str:
    """A rule's pattern with its case flag inline, for the set of all of them."""
    pattern = rule.match if rule.regex else engine.escape(rule.match)
    return pattern if rule.case_sensitive else f"(?i:{pattern})"


# No rules and no limit: what a run holds until it has read its organization's rules.
EMPTY = Lexicon((), 0, limit=2**31)


# The page's text form of the rules: one a line, ``match = say``, then ``[regex]``,
# ``[case]`` or ``[regex, case]``; blank lines and lines starting with # are skipped.
_FLAGS = re.compile(r"\s+\[\s*(regex|case)\s*(?:,\s*(regex|case)\s*)?\]\s*$")


def rules_from_lines(text: str) -> list[dict[str, Any]]:
    """Rules (as the API takes them) from the page's text form; LexiconError names the
    line that cannot be read."""
    rules: list[dict[str, Any]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        flags: set[str] = set()
        found = _FLAGS.search(line)
        if found is not None:
            flags = {f for f in found.groups() if f}
            line = line[: found.start()]
        match, sep, say = line.partition(" = ")
        if not sep:
            raise LexiconError(f"line {n}: write it as: match = say")
        rules.append(
            {
                "match": match.strip(),
                "say": say.strip(),
                "regex": "regex" in flags,
                "case_sensitive": "case" in flags,
            }
        )
    return rules


def lines_of(rules: Iterable[Rule]) -> str:
    """The page's text form of rules."""
    lines = []
    for rule in rules:
        flags = [name for name, on in (("regex", rule.regex), ("case", rule.case_sensitive)) if on]
        tail = f" [{', '.join(flags)}]" if flags else ""
        lines.append(f"{rule.match} = {rule.say}{tail}")
    return "\n".join(lines)
