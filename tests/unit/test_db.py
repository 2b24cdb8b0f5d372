"""The parts of db.py that need no database."""

from __future__ import annotations

import pytest

from speechbatch.adapters.db import make_engine
from speechbatch.errors import ConfigError


@pytest.mark.parametrize(
    "query", ["prepare_threshold=soon", "prepare_threshold=1&prepare_threshold=2"]
)
def test_a_prepare_threshold_that_is_not_a_number_or_none_is_a_config_error(query: str) -> None:
    with pytest.raises(ConfigError, match="prepare_threshold"):
        make_engine(f"postgresql+psycopg://nobody@127.0.0.1:1/nothing?{query}")
