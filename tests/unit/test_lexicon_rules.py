"""The lexicon's pure rules: whole-word literals, case, order, refused regexes, the time
bound at apply time, the prefilter against applying every rule, the page's text form."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speechbatch.domain.editing import spoken_text
from speechbatch.domain.lexicon import (
    APPLY_SECONDS,
    Lexicon,
    LexiconError,
    LexiconTimeout,
    Rule,
    lines_of,
    parse_rules,
    rules_from_lines,
)


def test_a_literal_rule_replaces_whole_words_in_any_case_by_default() -> None:
    lexicon = Lexicon.compile([Rule("SQL", "sequel"), Rule("C++", "C plus plus")])
    assert lexicon.apply("SQL, sql and SQLite; NoSQL.") == "sequel, sequel and SQLite; NoSQL."
    assert lexicon.apply("I like C++.") == "I like C plus plus."
    assert spoken_text("sql", lexicon) == "sequel" and spoken_text("sql") == "sql"


def test_case_sensitive_rules_and_rules_apply_in_order() -> None:
    lexicon = Lexicon.compile(
        [Rule("US", "United States", case_sensitive=True), Rule("United", "One")]
    )
    assert lexicon.apply("us and US") == "us and One States"


def test_a_regex_rule_replaces_what_it_matches_with_literal_text() -> None:
    lexicon = Lexicon.compile([Rule(r"(\d+)kg", r"\1 kilograms", regex=True)])
    assert lexicon.apply("5kg") == r"\1 kilograms"


@pytest.mark.parametrize(
    "pattern", ["(a+)+$", r"(\w+\s?)*$", "(x|xx)*y", "(a|aa)+$", "(", "a*", "(?:)"]
)
def test_a_regex_that_does_not_compile_or_may_run_away_is_refused(pattern: str) -> None:
    with pytest.raises(LexiconError, match="rule 1"):
        parse_rules([{"match": pattern, "say": "x", "regex": True}])


def test_a_runaway_rule_that_got_through_is_bounded_at_apply_time() -> None:
    # Stored rules are not probed again: the time limit is what bounds them, and running
    # out of it is an error naming the rule, never the text with the rule left out.
    lexicon = Lexicon.compile([Rule("(x|xx)*y", "z", regex=True)], checked=True)
    started = time.monotonic()
    with pytest.raises(LexiconTimeout, match="rule 1"):
        lexicon.apply("x" * 60 + "!y")
    # regex checks its timeout now and then, not at every step: allow it some slack.
    assert time.monotonic() - started < APPLY_SECONDS * 8


def test_rules_that_refer_to_groups_are_still_prefiltered_right() -> None:
    lexicon = Lexicon.compile([Rule(r"(ab)\1", "X", regex=True), Rule("cd", "Y")])
    assert lexicon.touches("ababab") and lexicon.apply("abab cd") == "X Y"
    assert not lexicon.touches("ab ba")


WORDS = st.sampled_from(["SQL", "sql", "Dr.", "kg", "alpha", "C++", "x"])


@settings(max_examples=200, deadline=None)
@given(
    rules=st.lists(st.tuples(WORDS, st.sampled_from(["", "y", "SQL"]), st.booleans()), max_size=5),
    words=st.lists(st.one_of(WORDS, st.sampled_from(["SQLite", "NoSQL", " ", ", "])), max_size=8),
)
def test_the_prefilter_never_skips_a_text_a_rule_would_change(
    rules: list[tuple[str, str, bool]], words: list[str]
) -> None:
    lexicon = Lexicon.compile([Rule(m, s, case_sensitive=c) for m, s, c in rules])
    text = " ".join(words)
    by_hand = text
    for compiled, rule in zip(lexicon._compiled, lexicon.rules, strict=True):
        by_hand = compiled.sub(lambda _m, say=rule.say: say, by_hand)
    assert lexicon.apply(text) == by_hand
    if by_hand != text:
        assert lexicon.touches(text)


def test_the_pages_text_form_round_trips() -> None:
    rules = [Rule("SQL", "sequel"), Rule(r"Dr\.", "Doctor", regex=True, case_sensitive=True)]
    assert lines_of(rules) == "SQL = sequel\nDr\\. = Doctor [regex, case]"
    assert parse_rules(rules_from_lines(lines_of(rules) + "\n\n# a note\n")) == rules
    with pytest.raises(LexiconError, match="line 2"):
        rules_from_lines("a = b\nno separator")
