"""Which lines of a script name a speaker, and what the rest of the line says."""

from __future__ import annotations

import pytest

from speechbatch.domain.cast import changed_speakers, voice_of
from speechbatch.domain.scripts import script_line, split_script


@pytest.mark.parametrize(
    ("line", "markdown", "expected"),
    [
        ("ALICE: Hello.", False, ("ALICE", "Hello.")),
        ("  Mary-Jane O'Neil :  Fine. ", False, ("Mary-Jane O'Neil", "Fine.")),
        ("Dr. Watson: Indeed: quite.", False, ("Dr. Watson", "Indeed: quite.")),
        ("**Bob:** Hi!", True, ("Bob", "Hi!")),
        ("*Bob*: Hi!", True, ("Bob", "Hi!")),
        ("**Bob:** Hi!", False, (None, "**Bob:** Hi!")),
        ("*emphasis* only", True, (None, "*emphasis* only")),
        ("10:30 came.", False, (None, "10:30 came.")),
        ("Alice:", False, (None, "Alice:")),
        ("One two three four five: words", False, (None, "One two three four five: words")),
        ("x" * 51 + ": too long a name", False, (None, "x" * 51 + ": too long a name")),
        ("The rain fell.", False, (None, "The rain fell.")),
    ],
)  # fmt: skip
def test_a_line_names_its_speaker_or_is_narration(
    line: str, markdown: bool, expected: tuple[str | None, str]
) -> None:
    assert script_line(line, markdown) == expected


def test_a_script_without_a_heading_is_one_chapter_named_by_the_title() -> None:
    script = split_script("A: one\n\nnarration\n", 200, markdown=True, title="Play")
    assert [(i.speaker, i.text, i.chapter) for i in script.items] == [
        ("A", "one", 0), (None, "narration", 0),
    ]  # fmt: skip
    assert [(c.title, c.first_position) for c in script.chapters] == [("Play", 1)]


def test_only_the_speakers_whose_voice_changes_are_named() -> None:
    before = {"Alice": "echo", "Bob": "alloy"}
    after = {"Alice": "alloy", "Bob": "alloy", "Carol": "echo"}
    assert changed_speakers(before, after, "alloy") == ["Alice", "Carol"]
    assert voice_of(None, after, "alloy") == "alloy" and voice_of("Carol", after, "x") == "echo"
