"""How lengths read on the pages: as the players show them, hours never folded into
minutes."""

from __future__ import annotations

import pytest

from speechbatch.web.presenters import format_duration


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, ""),
        (0, "0:00"),
        (4.9, "0:04"),
        (59.99, "0:59"),
        (60, "1:00"),
        (3599, "59:59"),
        (3600, "1:00:00"),
        (7988.6, "2:13:08"),
        (36_000 + 61, "10:01:01"),
    ],
)
def test_lengths_read_as_players_show_them(seconds: float | None, shown: str) -> None:
    assert format_duration(seconds) == shown
