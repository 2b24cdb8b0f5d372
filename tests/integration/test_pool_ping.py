"""The PostgreSQL pool: pings, and the prepared statements that the URL asks for.

A ping per checkout was a round trip in each of a run's short transactions; a connection
used a moment ago is not pinged, one idle longer than PING_AFTER_IDLE_SECONDS is, and a
connection the database dropped while it was idle is replaced without an error.
``?prepare_threshold=`` in the database URL reaches psycopg (a number, or ``none`` for a
PgBouncer that cannot keep prepared statements), and a read (which ends with COMMIT)
leaves the connection's prepared statements in place (psycopg deallocates them all at a
ROLLBACK).
(PostgreSQL only: SQLite connections are files, there is nothing to ping or prepare.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text

from speechbatch.adapters import db
from speechbatch.adapters.db import make_session_factory
from speechbatch.adapters.uow import SessionUowFactory


@pytest.fixture
def engine(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 0.3)
    engine = db.make_engine(database_url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def pings(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The times of every ping the engine's dialect sends."""
    seen: list[float] = []
    original = engine.dialect.do_ping

    def counting(dbapi_connection: Any) -> bool:
        seen.append(time.monotonic())
        return bool(original(dbapi_connection))

    monkeypatch.setattr(engine.dialect, "do_ping", counting)
    return seen


def _backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_connection_just_given_back_is_not_pinged(engine: Engine, pings: list[float]) -> None:
    first = _backend_pid(engine)
    for _ in range(20):
        assert _backend_pid(engine) == first  # the same pooled connection each time
    assert pings == []


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_connection_idle_for_a_while_is_pinged(engine: Engine, pings: list[float]) -> None:
    first = _backend_pid(engine)
    time.sleep(0.4)
    assert _backend_pid(engine) == first
    assert len(pings) == 1
    assert _backend_pid(engine) == first
    assert len(pings) == 1  # used just now: not pinged again


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_connection_dropped_while_idle_is_replaced(
    engine: Engine, pings: list[float], database_url: str
) -> None:
    dropped = _backend_pid(engine)
    with db.make_engine(database_url, pool=False).connect() as other:
        assert other.execute(
            text("SELECT pg_terminate_backend(:pid)"), {"pid": dropped}
        ).scalar_one()
    time.sleep(0.4)
    # No error: the ping found the connection dead and the pool connected afresh.
    assert _backend_pid(engine) != dropped
    assert len(pings) == 1


def _threshold(connection: Any) -> Any:
    """psycopg's prepare_threshold of the connection's DBAPI connection."""
    return connection.connection.driver_connection.prepare_threshold


def _backend_pid_of(connection: Any) -> int:
    return int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())


_MARK = "SELECT 41 + :n AS prepared_once"


def _prepared(connection: Any) -> int:
    return int(
        connection.execute(
            text("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE :s"),
            {"s": "%prepared_once%"},
        ).scalar_one()
    )


@pytest.mark.parametrize("backend", ["postgresql"])
def test_psycopgs_default_threshold_applies_without_a_setting(database_url: str) -> None:
    engine = db.make_engine(database_url)
    try:
        with engine.connect() as connection:
            assert _threshold(connection) == 5
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_prepare_threshold_zero_in_the_url_prepares_at_the_first_run(database_url: str) -> None:
    engine = db.make_engine(database_url + "?prepare_threshold=0")
    try:
        with engine.connect() as connection:
            assert _prepared(connection) == 0
            assert connection.execute(text(_MARK), {"n": 1}).scalar_one() == 42
            assert _prepared(connection) == 1
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql"])
@pytest.mark.parametrize("spelling", ["none", "None"])
def test_prepare_threshold_none_in_the_url_never_prepares(database_url: str, spelling: str) -> None:
    """What a PgBouncer in transaction mode without prepared-statement support needs: a
    statement run many times on a connection is never prepared on the server."""
    engine = db.make_engine(f"{database_url}?prepare_threshold={spelling}")
    try:
        with engine.connect() as connection:
            assert _threshold(connection) is None
            for n in range(10):
                assert connection.execute(text(_MARK), {"n": n}).scalar_one() == 41 + n
            assert _prepared(connection) == 0
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_read_keeps_the_connections_prepared_statements(database_url: str) -> None:
    """A reader ends its read-only transaction with COMMIT: a ROLLBACK would make psycopg
    deallocate every statement prepared on the connection (the runner's among them)."""
    engine = db.make_engine(database_url + "?prepare_threshold=0")
    uow_factory = SessionUowFactory(make_session_factory(engine))
    try:
        with uow_factory() as writer:
            pid = _backend_pid_of(writer.session)
            writer.session.execute(text(_MARK), {"n": 1})
            writer.commit()
        # One unit at a time: the pool's one connection is lent again each time.
        with uow_factory(read_only=True) as reader:
            assert _backend_pid_of(reader.session) == pid
            assert _prepared(reader.session) == 1
        with uow_factory(read_only=True) as reader:
            assert _backend_pid_of(reader.session) == pid
            assert _prepared(reader.session) == 1  # still there after the first read
    finally:
        engine.dispose()
