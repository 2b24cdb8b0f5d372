"""The pronunciation lexicon: ordered rules that turn an item's text into its spoken text.

A literal rule replaces whole words only ("SQL" never touches "SQLite"); a regex rule is
compiled with the ``regex`` package, refused when it does not compile, matches empty
text or looks like it can run away, and is always applied under a time limit, so no
rule can hang a request or a run. ``say`` is literal text (no group references).

The spoken text is a pure function of (text, rules): a rule that runs out of time
raises LexiconTimeout naming it, never gives a text with that rule left out, so a
run's grouping, its start, the estimate, the stale pass and a preview can never
disagree about what a line says.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import regex

MAX_RULES = 1000
MAX_MATCH = 200
MAX_SAY = 1000
# Each text gets this much matching time in all; a rule that would take longer raises
# LexiconTimeout for that text (each caller decides what that means), never waited for.
APPLY_SECONDS = 0.25
# A probe that a sane pattern answers in microseconds; a runaway one does not.
PROBE_SECONDS = 0.05
# Nested quantifiers, e.g. (a+)+ or (\w*)*: the classic catastrophic backtracking.
_NESTED = regex.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)\s*(?:[+*]|\{\d*,)")


class LexiconError(ValueError):
    """A rule that cannot be used; the message names it (1-based) and says why."""


class LexiconTimeout(LexiconError):
    """A rule ran out of time on a text: that text has no spoken text with these rules."""

    def __init__(self, n: int, rule: Rule) -> None:
        super().__init__(
            f"rule {n} “{rule.match}” ran out of time on this line: "
            "shorten the line or simplify the rule"
        )
        self.rule_number = n


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


def _pattern(rule: Rule) -> str:
    if rule.regex:
        return rule.match
    # Whole words: no word character right before or after (works for "C++" too).
    return r"(?<!\w)" + regex.escape(rule.match) + r"(?!\w)"


def _flags(rule: Rule) -> int:
    return regex.V0 | (0 if rule.case_sensitive else regex.IGNORECASE)


def _probes(pattern: str) -> list[str]:
    """Texts that make a runaway pattern backtrack: runs of its own characters that end
    in something it does not expect, then its other characters (a required literal)."""
    chars = sorted({c for c in pattern if c.isalnum() or c in " -_.,"} or {"a"})
    every = "".join(chars)
    runs = [c * 40 for c in chars[:12]] + [every * 8, " " * 40]
    return [r + end for r in runs for end in ("!", "\x00", "!" + every)]


def _check_regex(n: int, rule: Rule) -> Any:
    try:
        compiled = regex.compile(rule.match, _flags(rule))
    except (regex.error, OverflowError, RecursionError, ValueError) as exc:
        raise LexiconError(f"rule {n} “{rule.match}”: the regex does not compile: {exc}") from None
    if _NESTED.search(rule.match):
        raise LexiconError(f"rule {n} “{rule.match}”: nested repetition such as (a+)+ can run away")
    try:
        if compiled.fullmatch("", timeout=PROBE_SECONDS) is not None:
            raise LexiconError(f"rule {n} “{rule.match}”: the regex matches empty text")
        for probe in _probes(rule.match):
            compiled.search(probe, timeout=PROBE_SECONDS)
    except TimeoutError:
        raise LexiconError(f"rule {n} “{rule.match}”: the regex can run away") from None
    return compiled


def parse_rules(raw: Any) -> list[Rule]:
    """Rules from a request's ``rules`` (a list of objects), checked: at most 1,000,
    ``match`` 1-200 characters, regexes that compile and cannot run away."""
    if not isinstance(raw, list):
        raise LexiconError("rules must be a list")
    if len(raw) > MAX_RULES:
        raise LexiconError(f"at most {MAX_RULES} rules")
    rules = [_one_rule(n, item) for n, item in enumerate(raw, start=1)]
    Lexicon.compile(rules)  # every regex checked
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
        raise LexiconError(f"rule {n}: say must be a text of at most {MAX_SAY} characters")
    if "\x00" in match or "\x00" in say:
        raise LexiconError(f"rule {n}: contains a NUL")
    flags = {k: item.get(k, False) for k in ("regex", "case_sensitive")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise LexiconError(f"rule {n}: {key} must be true or false")
    return Rule(match, say, flags["regex"], flags["case_sensitive"])


class Lexicon:
    """Compiled rules of one version: ``apply`` gives the spoken text, ``touches`` says
    (one search of one compiled alternation) whether any rule can change a text."""

    def __init__(self, rules: Sequence[Rule], compiled: list[Any], version: int) -> None:
        self.rules = tuple(rules)
        self.version = version
        self._compiled = compiled
        # One alternation of every rule whose pattern means the same inside it (group
        # references would point elsewhere); the others are searched one by one.
        alone = [c for r, c in zip(rules, compiled, strict=True) if _refers(r)]
        joined = [f"(?:{_inline(r)})" for r in rules if not _refers(r)]
        self._any: Any = None
        if joined:
            try:
                self._any = regex.compile("|".join(joined), regex.V0)
            except (regex.error, OverflowError, RecursionError, ValueError):
                alone = compiled
        self._alone = alone

    @classmethod
    def compile(cls, rules: Iterable[Rule], version: int = 0, *, checked: bool = False) -> Lexicon:
        """Compile and check rules (LexiconError names the first that cannot be used);
        ``checked``: rules that passed the checks when they were saved (the time-based
        probe is not run again: a loaded machine must not refuse stored rules)."""
        rules = list(rules)
        compiled = []
        for n, rule in enumerate(rules, start=1):
            if rule.regex and not checked:
                compiled.append(_check_regex(n, rule))
            else:
                compiled.append(regex.compile(_pattern(rule), _flags(rule)))
        return cls(rules, compiled, version)

    def touches(self, text: str) -> bool:
        """Whether some rule may match the text (if none does, ``apply`` returns it as
        is); a search that runs out of time answers True (``apply`` then decides)."""
        try:
            if self._any is not None and self._any.search(text, timeout=APPLY_SECONDS):
                return True
            return any(c.search(text, timeout=APPLY_SECONDS) for c in self._alone)
        except TimeoutError:
            return True

    def apply(self, text: str) -> str:
        """The rules applied in order, within APPLY_SECONDS in all. When the time runs
        out, LexiconTimeout names the rule that took the longest on this text (the time
        is shared: the rule running then may be a quick one after a slow one)."""
        if not self.touches(text):
            return text
        deadline = time.monotonic() + APPLY_SECONDS
        spent: list[float] = []
        for rule, compiled in zip(self.rules, self._compiled, strict=True):
            began = time.monotonic()
            if began >= deadline:
                raise self._slowest(spent)
            try:
                text = compiled.sub(lambda _m, say=rule.say: say, text, timeout=deadline - began)
            except TimeoutError:
                spent.append(deadline - began)  # all the time it was given
                raise self._slowest(spent) from None
            spent.append(time.monotonic() - began)
        return text

    def _slowest(self, spent: list[float]) -> LexiconTimeout:
        """The error naming the rule that took the longest (the first, if none ran)."""
        n = max(range(len(spent)), key=spent.__getitem__, default=0)
        return LexiconTimeout(n + 1, self.rules[n])


_REFERENCE = regex.compile(r"\\[1-9g]|\(\?(?:P=|&|R|\d|[+-]\d)")


def _refers(rule: Rule) -> bool:
    """Whether a regex rule refers to groups by number or name (or recurses)."""
    return rule.regex and _REFERENCE.search(rule.match) is not None


def _inline(rule: Rule) -> str:
    """A rule's pattern with its flags inline, for the alternation of all of them."""
    return _pattern(rule) if rule.case_sensitive else f"(?i:{_pattern(rule)})"


EMPTY = Lexicon((), [], 0)


# The page's text form of the rules: one a line, ``match = say``, then ``[regex]``,
# ``[case]`` or ``[regex, case]``; blank lines and lines starting with # are skipped.
_FLAGS = regex.compile(r"\s+\[\s*(regex|case)\s*(?:,\s*(regex|case)\s*)?\]\s*$")


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
