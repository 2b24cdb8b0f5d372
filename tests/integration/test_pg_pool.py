"""The pool of PostgreSQL test databases hands each test what a fresh copy of the template
would be: no row of the last test, sequences from the start, the migrations' own rows,
and a new database when a test changed the schema."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.conftest import PG_ADMIN_DSN
from tests.support.pg_pool import DatabasePool

pytestmark = pytest.mark.parametrize("backend", ["postgresql"])


@pytest.fixture
def pool(backend: str, pg_template: str) -> Iterator[DatabasePool]:
    made = DatabasePool(PG_ADMIN_DSN, pg_template)
    yield made
    made.close()


def _connect(name: str) -> psycopg.Connection[Any]:
    return psycopg.connect(PG_ADMIN_DSN.rsplit("/", 1)[0] + "/" + name, autocommit=True)


def _state(name: str) -> tuple[Any, ...]:
    with _connect(name) as conn:
        return (
            conn.execute("SELECT count(*) FROM organizations").fetchone(),
            conn.execute("SELECT * FROM provider_pace").fetchall(),
            conn.execute(
                "INSERT INTO organizations (slug) VALUES ('probe') RETURNING id"
            ).fetchone(),
        )


def test_a_database_given_back_is_handed_out_again_as_the_template_was(
    pool: DatabasePool,
) -> None:
    first = pool.take()
    fresh = _state(first)
    assert fresh[0] == (0,) and fresh[1]  # no organization; the migrations' pace row
    with _connect(first) as conn:
        conn.execute(
            "INSERT INTO organizations (slug) SELECT 'o' || n FROM generate_series(1, 5) n"
        )
        conn.execute("DELETE FROM provider_pace")
    pool.give_back(first)
    again = pool.take()
    assert again == first
    assert _state(again) == fresh  # the same rows, and ids from the start again


def test_a_session_left_open_is_ended_and_a_changed_schema_is_dropped(
    pool: DatabasePool,
) -> None:
    name = pool.take()
    left_open = _connect(name)
    left_open.execute("ALTER TABLE jobs ADD COLUMN extra text")
    pool.give_back(name)
    assert left_open.closed or left_open.broken or _is_ended(left_open)
    left_open.close()
    assert name not in pool.free and name not in pool.made
    other = pool.take()
    assert other != name
    with _connect("postgres") as admin:
        assert (
            admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            is None
        )


def _is_ended(conn: psycopg.Connection[Any]) -> bool:
    try:
        conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return False
