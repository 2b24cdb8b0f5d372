"""The fault proxy of the fault suite (tests/support/pg_proxy.py) injects what it says.

PostgreSQL only: the proxy speaks PostgreSQL's wire protocol (SQLite has no connection to
cut). Each test proves one fault from the client's side and from the server's: a lost
acknowledgement is a commit that happened while the client saw an error; a reset rolls the
transaction back; a black hole forwards nothing for as long as it lasts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from tests.support.pg_proxy import PgProxy
from tests.support.server import drop_pg_database, make_pg_database

pytestmark = pytest.mark.usefixtures("pg_available")


@pytest.fixture
def database() -> Iterator[str]:
    """A fresh PostgreSQL database with one table ``t(v int)``: its libpq URL."""
    url = make_pg_database("sb_proxy").replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (v int)")
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def proxy() -> Iterator[PgProxy]:
    """A started proxy in front of the machine's PostgreSQL."""
    started = PgProxy().start()
    try:
        yield started
    finally:
        started.stop()


def values(url: str) -> list[int]:
    """The table's values, read directly (not through the proxy)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [row[0] for row in conn.execute("SELECT v FROM t ORDER BY v")]


def connect(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection whose failures come within seconds (the defaults would wait forever)."""
    return psycopg.connect(url, connect_timeout=2, **kwargs)


def test_queries_pass_through(database: str, proxy: PgProxy) -> None:
    with connect(proxy.url(database)) as conn:
        conn.execute("INSERT INTO t VALUES (1)")
        conn.commit()
    assert values(database) == [1]
    assert proxy.stats.commits == 1 and proxy.stats.acks_dropped == 0


def test_lost_ack_of_a_simple_query_commit_happened(database: str, proxy: PgProxy) -> None:
    conn = connect(proxy.url(database))
    conn.execute("INSERT INTO t VALUES (7)")
    proxy.drop_after_commit(1)
    with pytest.raises(psycopg.OperationalError):
        conn.commit()  # psycopg sends COMMIT as a simple Query ('Q')
    conn.close()
    assert values(database) == [7]  # the commit happened; the client was told it failed
    assert proxy.stats.acks_dropped == 1 and proxy.drops_left() == 0


def test_lost_ack_of_a_prepared_commit_happened(database: str, proxy: PgProxy) -> None:
    conn = connect(proxy.url(database), autocommit=True)
    conn.execute("BEGIN")
    conn.execute("INSERT INTO t VALUES (8)")
    proxy.drop_after_commit(1)
    with pytest.raises(psycopg.OperationalError):
        conn.execute("COMMIT", prepare=True)  # Parse ('P') + Bind + Execute + Sync
    conn.close()
    assert values(database) == [8]
    assert proxy.stats.acks_dropped == 1


def test_lost_ack_through_sqlalchemy_commit_happened(database: str, proxy: PgProxy) -> None:
    url = proxy.url(database).replace("postgresql://", "postgresql+psycopg://", 1)
    engine = sa.create_engine(url, connect_args={"connect_timeout": 2})
    try:
        proxy.drop_after_commit(1)
        with pytest.raises(sa.exc.OperationalError), engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO t VALUES (9)"))
        assert values(database) == [9]
        with engine.begin() as conn:  # the pool replaces the dropped connection
            conn.execute(sa.text("INSERT INTO t VALUES (10)"))
    finally:
        engine.dispose()
    assert values(database) == [9, 10]


def test_only_the_asked_number_of_acks_is_lost(database: str, proxy: PgProxy) -> None:
    proxy.drop_after_commit(2)
    outcomes = []
    for value in range(3):
        try:
            with connect(proxy.url(database)) as conn:
                conn.execute("INSERT INTO t VALUES (%s)", (value,))
                conn.commit()
            outcomes.append("ok")
        except psycopg.OperationalError:
            outcomes.append("error")
    assert outcomes == ["error", "error", "ok"]
    assert values(database) == [0, 1, 2]


def test_reset_mid_transaction_rolls_back(database: str, proxy: PgProxy) -> None:
    conn = connect(proxy.url(database))
    conn.execute("INSERT INTO t VALUES (3)")
    assert proxy.reset_all() == 1
    with pytest.raises(psycopg.OperationalError):
        conn.execute("INSERT INTO t VALUES (4)")
        conn.commit()
    conn.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _backends(database) > 0:
        time.sleep(0.05)  # the server notices the dropped connection and rolls back
    assert values(database) == []
    with connect(proxy.url(database)) as again:  # new connections work at once
        assert again.execute("SELECT 1").fetchone() == (1,)


def _backends(url: str) -> int:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_refusing_black_hole_refuses_then_comes_back(database: str, proxy: PgProxy) -> None:
    held = connect(proxy.url(database), autocommit=True)
    proxy.black_hole(1.5, refuse=True)
    with pytest.raises(psycopg.OperationalError):
        held.execute("SELECT 1")  # reset when the hole opened
    held.close()
    with pytest.raises(psycopg.OperationalError):
        connect(proxy.url(database))  # refused while it lasts
    back = proxy.wait_until_back(10)
    with connect(proxy.url(database), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert time.monotonic() >= back


def test_stalling_black_hole_forwards_nothing_while_it_lasts(database: str, proxy: PgProxy) -> None:
    held = connect(proxy.url(database), autocommit=True)
    seconds = 1.5
    proxy.black_hole(seconds)
    started = time.monotonic()
    outcome: dict[str, object] = {}

    def new_connection() -> None:  # made during the hole: answered once it is over
        with connect(proxy.url(database), autocommit=True) as conn:
            outcome["new"] = conn.execute("SELECT 2").fetchone()
            outcome["new_after"] = time.monotonic() - started

    thread = threading.Thread(target=new_connection)
    thread.start()
    with pytest.raises(psycopg.OperationalError):
        held.execute("SELECT 1")  # stalls, then is reset as after a failover
    waited = time.monotonic() - started
    held.close()
    thread.join(10)
    assert waited >= seconds - 0.1
    assert outcome.get("new") == (2,)
    assert float(str(outcome["new_after"])) >= seconds - 0.1


def test_refuse_touching_resets_only_those_queries_for_its_window(
    database: str, proxy: PgProxy
) -> None:
    with connect(proxy.url(database), autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (1)")
    proxy.refuse_touching(0.8, b"UPDATE t")
    with connect(proxy.url(database)) as other:  # other queries go through
        other.execute("INSERT INTO t VALUES (2)")
        other.commit()
    for prepare in (False, True):  # a simple Query, and a Parse + Bind + Execute
        conn = connect(proxy.url(database))
        conn.execute("INSERT INTO t VALUES (3)")
        with pytest.raises(psycopg.OperationalError):
            conn.execute("UPDATE t SET v = v + 10", prepare=prepare)
        conn.close()
    assert values(database) == [1, 2]  # each refused transaction rolled back
    assert proxy.stats.resets == 2
    back = proxy.wait_until_back(5)
    assert not proxy.refusing() and back > 0
    with connect(proxy.url(database)) as conn:  # the window is over
        conn.execute("UPDATE t SET v = v + 10")
        conn.commit()
    assert values(database) == [11, 12]


def test_refuse_touching_also_refuses_a_statement_prepared_before_the_window(
    database: str, proxy: PgProxy
) -> None:
    with connect(proxy.url(database), autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("UPDATE t SET v = v + %s", (1,), prepare=True)  # Parse now
        proxy.refuse_touching(5, b"UPDATE t")
        with pytest.raises(psycopg.OperationalError):  # Bind + Execute only
            conn.execute("UPDATE t SET v = v + %s", (1,), prepare=True)
    assert values(database) == [2]
