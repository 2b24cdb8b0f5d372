"""The lexicon's pure rules: whole-word literals, case, order, regexes in RE2 syntax (the
constructs it lacks refused by name), the bounds on a line's spoken text and work, the
prefilter against applying every rule, the page's text form."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speechbatch.domain.lexicon import (
    MAX_REPLACEMENTS,
    Lexicon,
    LexiconError,
    Rule,
    SpokenTextTooLong,
    TooManyReplacements,
    Unspeakable,
    UnsupportedRegex,
    lines_of,
    parse_rules,
    rules_from_lines,
)

LIMIT = 4096


def lexicon_of(*rules: Rule, limit: int = LIMIT) -> Lexicon:
    return Lexicon.compile(rules, limit=limit)


def test_a_literal_rule_replaces_whole_words_in_any_case_by_default() -> None:
    lexicon = lexicon_of(Rule("SQL", "sequel"), Rule("C++", "C plus plus"))
    assert lexicon.spoken("SQL, sql and SQLite; NoSQL.") == "sequel, sequel and SQLite; NoSQL."
    assert lexicon.spoken("I like C++.") == "I like C plus plus."
    assert lexicon.spoken("SQL SQL_x SQL") == "sequel SQL_x sequel"
    # Words of any script: a letter on either side is part of the word.
    assert lexicon.spoken("éSQL SQLé SQL·") == "éSQL SQLé sequel·"


def test_case_sensitive_rules_and_rules_apply_in_order() -> None:
    lexicon = lexicon_of(Rule("US", "United States", case_sensitive=True), Rule("United", "One"))
    assert lexicon.spoken("us and US") == "us and One States"


def test_a_regex_rule_replaces_what_it_matches_with_literal_text() -> None:
    lexicon = lexicon_of(Rule(r"(\d+)kg", r"\1 kilograms", regex=True))
    assert lexicon.spoken("5kg") == r"\1 kilograms"
    assert lexicon_of(Rule(r"dr\.", "Doctor", regex=True)).spoken("Dr. Who") == "Doctor Who"
    non_ascii = lexicon_of(Rule("straße", "Strasse", regex=True))
    assert non_ascii.spoken("STRASSE, Straße, straße") == "STRASSE, Strasse, Strasse"


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        (r"(ab)\1", r"backreference \1"),
        (r"(?P<w>a)(?P=w)", "backreference (?P=name)"),
        (r"(?<=Dr)\.", "lookbehind (?<=…)"),
        (r"x(?<!y)", "negative lookbehind (?<!…)"),
        (r"Dr(?=\.)", "lookahead (?=…)"),
        (r"a(?!b)", "negative lookahead (?!…)"),
        (r"(?>a+)b", "atomic group (?>…)"),
        (r"a++b", "possessive quantifier ++"),
        (r"(a|b(?R))", "recursion (?R)"),
        (r"(a)(?1)", "recursion (?N)"),
        (r"(?(1)a|b)", "conditional"),
        (r"end\Z", r"\Z"),
    ],
)
def test_a_regex_construct_without_linear_time_matching_is_refused_by_name(
    pattern: str, construct: str
) -> None:
    with pytest.raises(UnsupportedRegex, match="rule 1") as refused:
        parse_rules([{"match": pattern, "say": "x", "regex": True}])
    assert construct in str(refused.value) and "linear time" in str(refused.value)


@pytest.mark.parametrize("pattern", [r"[(?=]x", r"\(?=", r"a\++", r"(?P<name>a)b", r"(?i)x"])
def test_the_same_characters_escaped_or_in_a_class_are_accepted(pattern: str) -> None:
    assert parse_rules([{"match": pattern, "say": "x", "regex": True}])


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("(", "does not compile"),
        ("a*", "empty text"),
        ("(?:)", "empty text"),
        (r"\pL{100}", "too complex"),
    ],
)
def test_a_regex_that_does_not_compile_matches_empty_text_or_is_huge_is_refused(
    pattern: str, words: str
) -> None:
    with pytest.raises(LexiconError, match="rule 1") as refused:
        parse_rules([{"match": pattern, "say": "x", "regex": True}])
    assert words in str(refused.value) and not isinstance(refused.value, UnsupportedRegex)


def test_regex_rules_too_complex_together_are_refused() -> None:
    rules = [
        {"match": f"[a-z]{{1,200}}x{n}", "say": "y", "regex": True, "case_sensitive": True}
        for n in range(13)
    ]
    with pytest.raises(LexiconError, match="too complex together"):
        parse_rules(rules)


def test_patterns_that_backtrack_elsewhere_take_linear_time_here() -> None:
    lexicon = lexicon_of(
        *(Rule(p, "z", regex=True) for p in ["(x+x+)+y", "(a|aa)*b", "(.*,){12}X", "(\\w+\\s?)+$"])
    )
    started = time.monotonic()
    for text in ["x" * 4000, "a" * 4000, "a," * 2000, "word " * 800 + "!"]:
        lexicon.spoken(text)
    assert time.monotonic() - started < 1.0


def test_a_spoken_text_over_the_limit_is_unspeakable_never_another_text() -> None:
    lexicon = lexicon_of(Rule("a", "x" * 1000), limit=4096)
    assert len(lexicon.spoken("a " * 4)) == 4 * 1001
    with pytest.raises(SpokenTextTooLong, match="more than 4,096 characters"):
        lexicon.spoken("a " * 5)
    with pytest.raises(SpokenTextTooLong):
        lexicon.spoken("a " * 2047)  # grows to 2 MB without the bound: stopped at once
    with pytest.raises(SpokenTextTooLong):
        lexicon_of(limit=10).spoken("eleven char")


def test_chained_rules_cannot_grow_a_line_past_the_limit() -> None:
    lexicon = lexicon_of(Rule("a", "b " * 500), Rule("b", "c " * 500), Rule("c", "d " * 500))
    started = time.monotonic()
    with pytest.raises(SpokenTextTooLong):
        lexicon.spoken("a")
    assert time.monotonic() - started < 0.5


def test_a_line_the_rules_rewrite_too_often_is_unspeakable() -> None:
    rules = [Rule(f"[a-z{n % 10}]", "q", regex=True) for n in range(8)]
    lexicon = lexicon_of(*rules)
    text = "ab " * 1365
    with pytest.raises(TooManyReplacements, match=f"{MAX_REPLACEMENTS:,} times"):
        lexicon.spoken(text)
    assert isinstance(TooManyReplacements(), Unspeakable)


def test_stored_rules_the_engine_refuses_make_every_line_unspeakable() -> None:
    rules = [Rule("SQL", "sequel"), Rule(r"(?<=x)y", "z", regex=True)]
    lexicon = Lexicon.stored(rules, 3, limit=99)
    assert lexicon.version == 3
    with pytest.raises(Unspeakable, match="the lexicon cannot be used: rule 2"):
        lexicon.spoken("SQL")


WORDS = st.sampled_from(["SQL", "sql", "Dr.", "kg", "alpha", "C++", "x", "é", "naïve"])


def by_hand(rules: list[Rule], text: str) -> str:
    """The rules applied with Python's re (lookarounds for whole words): another engine."""
    for rule in rules:
        pattern = rule.match if rule.regex else rf"(?<!\w){re.escape(rule.match)}(?!\w)"
        flags = 0 if rule.case_sensitive else re.IGNORECASE
        text = re.sub(pattern, lambda _m, say=rule.say: say, text, flags=flags)
    return text


@settings(max_examples=200, deadline=None)
@given(
    rules=st.lists(
        st.tuples(WORDS, st.sampled_from(["", "y", "SQL", "é"]), st.booleans()), max_size=5
    ),
    words=st.lists(st.one_of(WORDS, st.sampled_from(["SQLite", "NoSQL", " ", ", "])), max_size=8),
)
def test_the_spoken_text_equals_applying_each_rule_by_hand_with_another_engine(
    rules: list[tuple[str, str, bool]], words: list[str]
) -> None:
    """Also: the prefilter (one scan of a set of every rule) never skips a rule that
    would change the text."""
    compiled = [Rule(m, s, case_sensitive=c) for m, s, c in rules]
    text = " ".join(words)
    assert lexicon_of(*compiled).spoken(text) == by_hand(compiled, text)


def test_the_pages_text_form_round_trips() -> None:
    rules = [Rule("SQL", "sequel"), Rule(r"Dr\.", "Doctor", regex=True, case_sensitive=True)]
    assert lines_of(rules) == "SQL = sequel\nDr\\. = Doctor [regex, case]"
    assert parse_rules(rules_from_lines(lines_of(rules) + "\n\n# a note\n")) == rules
    with pytest.raises(LexiconError, match="line 2"):
        rules_from_lines("a = b\nno separator")
