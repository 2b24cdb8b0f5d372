"""The stylesheet is whole: a merge that leaves a rule open swallows every rule after it
(seen: the phone layout of every table was lost, and pages scrolled sideways)."""

from __future__ import annotations

from pathlib import Path

CSS = Path(__file__).resolve().parents[2] / "src" / "speechbatch" / "static" / "app.css"


def test_every_rule_of_the_stylesheet_is_closed() -> None:
    depth = 0
    for number, line in enumerate(CSS.read_text().splitlines(), start=1):
        depth += line.count("{") - line.count("}")
        assert depth >= 0, f"app.css line {number}: a brace closes nothing"
        # Rules nest only inside @media blocks: two levels at most.
        assert depth <= 2, f"app.css line {number}: a rule is opened inside a rule"
    assert depth == 0, "app.css ends with a rule left open"
