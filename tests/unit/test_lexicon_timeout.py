"""A rule that runs out of time is an error naming it, never another spoken text: the
spoken text is a pure function of (text, rules), whatever the machine's load."""

from __future__ import annotations

from typing import Any

import pytest

from speechbatch.adapters.repositories.lexicon import DoneItem
from speechbatch.domain import lexicon as lexicon_module
from speechbatch.domain.lexicon import Lexicon, LexiconTimeout, Rule
from speechbatch.runner.item import Run
from speechbatch.runner.lifecycle import _groups
from speechbatch.services.lexicon import stale_now
from tests.fakes import FakeProvider


class OutOfTimeOnSlow:
    """The compiled pattern of the rule "slow": it runs out of time on every text that
    says "slow" (as a runaway pattern would on a crafted text) and matches no other."""

    def sub(self, _repl: Any, text: str, **_kwargs: Any) -> str:
        if "slow" in text:
            raise TimeoutError("regex timed out")
        return text

    def search(self, text: str, **_kwargs: Any) -> None:
        if "slow" in text:
            raise TimeoutError("regex timed out")


def slow_second_rule() -> Lexicon:
    """ "SQL" -> "sequel", then a rule on "slow" whose matching runs out of time."""
    rules = [Rule("SQL", "sequel"), Rule("slow", "fast")]
    fast = Lexicon.compile(rules[:1])
    return Lexicon(rules, [fast._compiled[0], OutOfTimeOnSlow()], 7)


def test_a_rule_that_runs_out_of_time_is_an_error_naming_it_every_time() -> None:
    lexicon = slow_second_rule()
    for _ in range(200):
        with pytest.raises(LexiconTimeout) as raised:
            lexicon.apply("SQL is slow")
        # Never "sequel is slow": rule 1 applied and rule 2 silently skipped.
        assert "rule 2 “slow” ran out of time on this line" in str(raised.value)
    # A text no rule can touch is spoken as written; the others are unaffected.
    assert lexicon.apply("SQL is quick") == "sequel is quick"


def test_no_time_left_is_an_error_not_a_shorter_text(monkeypatch: pytest.MonkeyPatch) -> None:
    lexicon = Lexicon.compile([Rule("SQL", "sequel"), Rule("NoSQL", "no sequel")])
    text = "SQL and NoSQL. " * 2000
    monkeypatch.setattr(lexicon_module, "APPLY_SECONDS", 0.0)
    for _ in range(200):
        with pytest.raises(LexiconTimeout, match="rule 1 “SQL” ran out of time"):
            lexicon.apply(text)


class Clock:
    """time.monotonic() as the lexicon sees it, moved on only by the patterns below."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class Takes:
    """A compiled pattern whose matching takes ``seconds`` of the clock and changes nothing."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    def sub(self, _repl: Any, text: str, **_kwargs: Any) -> str:
        self.clock.now += self.seconds
        return text


class UsesItsTimeUp:
    """A compiled pattern that uses all the time it is given and then times out."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def sub(self, _repl: Any, _text: str, *, timeout: float, **_kwargs: Any) -> str:
        self.clock.now += timeout
        raise TimeoutError("regex timed out")


def test_the_error_names_the_slow_rule_not_the_quick_one_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The time limit is shared by all rules of a line: rule 1 takes 0.24 s of the
    0.25 s, and rule 2 times out in the 0.01 s left. Rule 1 is the one to simplify."""
    clock = Clock()
    monkeypatch.setattr(lexicon_module, "time", clock)
    monkeypatch.setattr(lexicon_module, "APPLY_SECONDS", 0.25)
    rules = [Rule("SQL", "sequel"), Rule("NoSQL", "no sequel")]
    lexicon = Lexicon(rules, [Takes(clock, 0.24), UsesItsTimeUp(clock)], 7)
    with pytest.raises(LexiconTimeout, match="rule 1 “SQL” ran out of time"):
        lexicon.apply("SQL and NoSQL")


def test_a_line_a_rule_runs_out_of_time_on_is_stale() -> None:
    line = DoneItem(1, 1, 0, "it is slow", False, "it is slow", other_reason=False)
    plain = DoneItem(2, 1, 1, "it is quick", False, "it is quick", other_reason=False)
    assert stale_now(line, slow_second_rule()) is True
    assert stale_now(plain, slow_second_rule()) is False


def test_the_run_sets_a_line_a_rule_runs_out_of_time_on_apart_with_the_message() -> None:
    run = Run(1, 1, voice="alloy", organization_id=1, lexicon=slow_second_rule())
    items = [(10, "Learn SQL."), (11, "A slow line."), (12, "Learn sql.")]
    groups = _groups(FakeProvider(), run, items)
    failing, sent = groups
    assert failing.items == [(11, "A slow line.")] and failing.error is not None
    assert "rule 2" in failing.error and "ran out of time" in failing.error
    # The others carry their spoken text, computed once here, and share one request.
    assert sent.error is None and sent.items == [(10, "Learn sequel."), (12, "Learn sequel.")]
