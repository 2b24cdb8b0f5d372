"""The parts of db.py and postgres.py that need no database."""

from __future__ import annotations

import pytest

from speechbatch.adapters.db import make_engine
from speechbatch.adapters.postgres import libpq_url
from speechbatch.errors import ConfigError


@pytest.mark.parametrize(
    "query", ["prepare_threshold=soon", "prepare_threshold=1&prepare_threshold=2"]
)
def test_a_prepare_threshold_that_is_not_a_number_or_none_is_a_config_error(query: str) -> None:
    with pytest.raises(ConfigError, match="prepare_threshold"):
        make_engine(f"postgresql+psycopg://nobody@127.0.0.1:1/nothing?{query}")


def test_a_listeners_url_is_one_that_psycopg_connects_with() -> None:
    """No SQLAlchemy driver name, and no prepare_threshold (libpq refuses what it does not
    know), the password kept."""
    url = "postgresql+psycopg://app:secret@db:5432/sb?prepare_threshold=none"
    assert libpq_url(url) == "postgresql://app:secret@db:5432/sb"
