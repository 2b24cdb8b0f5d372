"""The PostgreSQL pool pings a connection at checkout only after it sat idle.

A ping per checkout was a round trip in each of a run's short transactions; a connection
used a moment ago is not pinged, one idle longer than PING_AFTER_IDLE_SECONDS is, and a
connection the database dropped while it was idle is replaced without an error.
(PostgreSQL only: SQLite connections are files, there is nothing to ping.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text

from speechbatch import db


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
