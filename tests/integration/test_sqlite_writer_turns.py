"""SQLite writers of one engine take turns on a Python lock, not in SQLite's busy handler.

A BEGIN IMMEDIATE that finds the write lock taken sleeps 1, 2, 5 ... ms in SQLite's busy
handler before it tries again; the engine's writers instead wait for the previous
writer's commit or rollback to return, and the turn must end on every way out of a
transaction (commit, rollback, close, a failed BEGIN, a connection dropped without
close), or every later writer would wait for the busy timeout. (SQLite only: PostgreSQL
writers lock rows, not the database.)
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text

from speechbatch.adapters import db
from speechbatch.adapters.uow import Reader, Writer
from speechbatch.errors import DatabaseUnavailable

pytestmark = pytest.mark.parametrize("backend", ["sqlite"])


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = db.make_engine(database_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)"))
        conn.execute(text("INSERT INTO counter VALUES (1, 0)"))
    try:
        yield engine
    finally:
        engine.dispose()


def _turn_taking(dbapi: object) -> db._TurnTakingConnection:
    """The engine's DBAPI connection as the class it is (db.make_engine's SQLite factory)."""
    assert isinstance(dbapi, db._TurnTakingConnection), dbapi
    return dbapi


def _turns(engine: Engine) -> threading.Lock:
    with engine.connect() as conn:
        lock: threading.Lock = type(_turn_taking(conn.connection.dbapi_connection)).turns
        return lock


def _writer(engine: Engine, **kwargs: Any) -> Writer:
    return Writer(db.make_session_factory(engine), **kwargs)


def test_the_turn_ends_with_the_commit_and_with_the_rollback(engine: Engine) -> None:
    turns = _turns(engine)
    with _writer(engine) as uow:
        uow.session.execute(text("UPDATE counter SET n = n + 1"))
        assert turns.locked()
        uow.commit()
        assert not turns.locked()
    with _writer(engine) as uow:
        uow.session.execute(text("UPDATE counter SET n = n + 1"))
        assert turns.locked()
    # The unit of work's exit rolled back.
    assert not turns.locked()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n FROM counter")).scalar_one() == 1


def test_a_reader_neither_takes_a_turn_nor_waits_for_one(engine: Engine) -> None:
    turns = _turns(engine)
    factory = db.make_session_factory(engine)
    with _writer(engine) as writer:
        writer.session.execute(text("UPDATE counter SET n = n + 1"))
        started = time.monotonic()
        with Reader(factory) as reader:
            assert reader.session.execute(text("SELECT n FROM counter")).scalar_one() == 0
        assert time.monotonic() - started < 1.0
        assert turns.locked()  # still the writer's
        writer.commit()
    assert not turns.locked()


def test_a_waiting_writer_goes_as_soon_as_the_previous_one_commits(engine: Engine) -> None:
    entered = threading.Event()
    done: list[float] = []

    def second() -> None:
        entered.set()
        with _writer(engine) as uow:
            uow.session.execute(text("UPDATE counter SET n = n * 10"))  # its BEGIN waits
            done.append(time.monotonic())
            uow.commit()

    with _writer(engine) as uow:
        uow.session.execute(text("UPDATE counter SET n = n + 1"))
        thread = threading.Thread(target=second)
        thread.start()
        entered.wait(5)
        time.sleep(0.2)
        assert done == []  # it waits for its turn
        uow.commit()
        committed = time.monotonic()
    thread.join(5)
    assert len(done) == 1 and done[0] >= committed
    with engine.connect() as conn:
        # It began after the first writer's commit: it saw its write.
        assert conn.execute(text("SELECT n FROM counter")).scalar_one() == 10


def test_an_impatient_writer_gives_up_after_the_lock_timeout(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "LOCK_TIMEOUT_MS", 300)
    turns = _turns(engine)
    errors: list[BaseException] = []

    def impatient() -> None:
        try:
            with _writer(engine, short_lock_wait=True) as uow:
                uow.session.execute(text("UPDATE counter SET n = n + 1"))
                uow.commit()
        except DatabaseUnavailable as error:
            errors.append(error)

    with _writer(engine) as uow:
        uow.session.execute(text("UPDATE counter SET n = n + 1"))
        started = time.monotonic()
        thread = threading.Thread(target=impatient)
        thread.start()
        thread.join(5)
        waited = time.monotonic() - started
        uow.commit()
    assert len(errors) == 1 and "database is locked" in str(errors[0].__cause__)
    assert 0.25 <= waited < 3.0
    assert not turns.locked()
    with _writer(engine) as uow:  # the engine's writers go on
        uow.session.execute(text("UPDATE counter SET n = n + 1"))
        uow.commit()


def test_a_connection_closed_or_dropped_inside_a_transaction_ends_its_turn(
    engine: Engine,
) -> None:
    turns = _turns(engine)
    raw = engine.raw_connection()
    dbapi = raw.dbapi_connection
    assert dbapi is not None
    assert dbapi.take_turn(1000)
    dbapi.execute("BEGIN IMMEDIATE")
    assert turns.locked()
    raw.invalidate()  # closes the DBAPI connection
    assert not turns.locked()

    connection_class = type(_turn_taking(dbapi))
    dropped = connection_class(":memory:")
    assert dropped.take_turn(1000)
    dropped.execute("BEGIN IMMEDIATE")
    assert turns.locked()
    del dropped
    gc.collect()
    assert not turns.locked()


def test_a_begin_refused_by_another_process_ends_its_turn(
    engine: Engine, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another engine stands for another process: it holds SQLite's own write lock, so
    the turn is ours but BEGIN IMMEDIATE fails after the busy timeout."""
    monkeypatch.setattr(db, "LOCK_TIMEOUT_MS", 300)
    turns = _turns(engine)
    other = db.make_engine(database_url)
    try:
        with _writer(other) as holder:
            holder.session.execute(text("UPDATE counter SET n = n + 1"))
            refused = pytest.raises(DatabaseUnavailable)
            with refused as info, _writer(engine, short_lock_wait=True) as uow:
                uow.session.execute(text("UPDATE counter SET n = n + 1"))
            assert "database is locked" in str(info.value.__cause__)
            assert not turns.locked()
            holder.commit()
    finally:
        other.dispose()
    with _writer(engine) as uow:
        uow.session.execute(text("UPDATE counter SET n = n + 1"))
        uow.commit()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n FROM counter")).scalar_one() == 2


def test_many_threads_of_writers_lose_no_update_and_never_overlap(engine: Engine) -> None:
    inside = 0
    most_inside = 0
    guard = threading.Lock()
    failures: list[BaseException] = []

    def work() -> None:
        nonlocal inside, most_inside
        try:
            for _ in range(25):
                with _writer(engine) as uow:
                    # The transaction (and the turn) begins with its first statement.
                    uow.session.execute(text("UPDATE counter SET n = n + 1"))
                    with guard:
                        inside += 1
                        most_inside = max(most_inside, inside)
                    time.sleep(0.0005)
                    with guard:
                        inside -= 1
                    uow.commit()
        except BaseException as error:  # reported below
            failures.append(error)

    threads = [threading.Thread(target=work) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert most_inside == 1
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n FROM counter")).scalar_one() == 12 * 25
