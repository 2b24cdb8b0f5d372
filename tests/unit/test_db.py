"""The statement helpers of db.py that need no database."""

from __future__ import annotations

import pytest
from sqlalchemy import column, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from speechbatch.db import const, one_of


@pytest.mark.parametrize("dialect", [postgresql.dialect(), sqlite.dialect()])
def test_constants_are_written_into_the_statement_not_bound(dialect: Dialect) -> None:
    statement = select(const(1), const(-1)).where(one_of(column("status"), ["PENDING", "ERROR"]))
    compiled = statement.compile(dialect=dialect)
    assert compiled.params == {}
    assert "status IN ('PENDING', 'ERROR')" in str(compiled)
    assert "SELECT 1, -1" in str(compiled)


@pytest.mark.parametrize("value", ["it's", "back\\slash", True, None, 1.5])
def test_a_value_that_is_not_a_plain_constant_is_refused(value: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        const(value)  # type: ignore[arg-type]
