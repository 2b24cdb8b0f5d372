"""Engine and session setup, timestamp type and the database's clock.

Every lease computation uses the database's clock (``clock_timestamp()`` on PostgreSQL),
never a web server's, so several machines with skewed clocks agree.

PostgreSQL may be reached directly or through a pooler in transaction mode (PgBouncer):
``postgres.py`` sets each connection up for what it goes through.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Engine,
    Integer,
    MetaData,
    create_engine,
    event,
    exc,
    literal,
)
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, sessionmaker
from sqlalchemy.pool import NullPool
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ColumnElement, FunctionElement
from sqlalchemy.types import TypeDecorator

from speechbatch.adapters.postgres import driver_arguments, make_pg_sessions, transaction_limits

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# How long a read's recovery waits for a row (PostgreSQL's lock_timeout, for every
# transaction) or for SQLite's write lock (its impatient writer): a process frozen inside a
# transaction holds them until it wakes or dies, and a read must answer the state as it is
# meanwhile.
LOCK_TIMEOUT_MS = 2000
SQLITE_BUSY_TIMEOUT_MS = 30000
# A pooled PostgreSQL connection is pinged at checkout only when it sat unused in the pool
# longer than this (see _ping_after_idle).
PING_AFTER_IDLE_SECONDS = 1.0
# Execution option of a unit of work that only reads (a deferred BEGIN on SQLite).
READ_ONLY = "speechbatch_read_only"
# Execution option of a writer that waits for a busy database only briefly (see above).
SHORT_LOCK_WAIT = "speechbatch_short_lock_wait"
# SQLAlchemy stores SQLite datetimes as text with six fractional digits; the clock below
# writes the same shape so that stored and computed timestamps compare as text.
_SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f000', 'now')"


# BIGINT on PostgreSQL, but INTEGER on SQLite so the column stays the rowid alias.
Id = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    """Declarative base with a naming convention so every constraint has a stable name."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite stores naive text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class db_now(FunctionElement[datetime]):
    """The database's current time (real time, not the transaction's start)."""

    type = UTCDateTime()
    inherit_cache = True


@compiles(db_now, "postgresql")
def _pg_now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "clock_timestamp()"


@compiles(db_now, "sqlite")
def _sqlite_now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return _SQLITE_NOW


class db_now_plus(FunctionElement[datetime]):
    """The database's current time plus a (signed) number of seconds."""

    type = UTCDateTime()
    inherit_cache = True


@compiles(db_now_plus, "postgresql")
def _pg_now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    (arg,) = element.clauses
    return f"(clock_timestamp() + make_interval(secs => {compiler.process(arg, **kw)}))"


@compiles(db_now_plus, "sqlite")
def _sqlite_now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    (arg,) = element.clauses
    return (
        "strftime('%Y-%m-%d %H:%M:%f000', 'now', "
        f"printf('%+.6f seconds', {compiler.process(arg, **kw)}))"
    )


def ago(seconds: float | ColumnElement[float]) -> ColumnElement[datetime]:
    """The database's time ``seconds`` ago, for lease cut-offs."""
    if isinstance(seconds, int | float):
        return db_now_plus(literal(-float(seconds)))
    return db_now_plus(-seconds)


def later(seconds: float) -> ColumnElement[datetime]:
    """The database's time ``seconds`` from now, for a lease's end."""
    return db_now_plus(literal(float(seconds)))


def make_engine(url: str, *, pool: bool = True, statement_reads: bool = False) -> Engine:
    """Create the engine with the per-backend session safety settings.

    ``statement_reads=True`` makes an engine for reads of one statement each: no BEGIN is
    sent (autocommit; one statement is one snapshot on both databases) and every session
    of its connections is read only (PostgreSQL's ``default_transaction_read_only``,
    SQLite's ``PRAGMA query_only``), so a write through it fails in the database. (Through
    a pooler, where no session is the app's own, its units are read-only transactions.)

    A PostgreSQL URL may say when psycopg prepares a statement on a direct connection:
    ``?prepare_threshold=N`` (after N runs on a connection; psycopg's default is 5) or
    ``?prepare_threshold=none`` (never). Through a pooler nothing is prepared.
    """
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {
            "check_same_thread": False,
            "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000,
            "factory": _writer_turns(),
        }
        engine = create_engine(url, **kwargs)
        _make_sqlite_immediate(engine, statement_reads=statement_reads)
        return engine
    parsed, connect_args = driver_arguments(make_url(url))
    if statement_reads:
        kwargs["isolation_level"] = "AUTOCOMMIT"
    kwargs["connect_args"] = connect_args
    if pool and statement_reads:
        # Only request threads read through it (the runner's transactions do not).
        kwargs.update(pool_timeout=10, pool_size=4, max_overflow=8)
    elif pool:
        kwargs.update(pool_timeout=10, pool_size=10, max_overflow=20)
    else:
        kwargs["poolclass"] = NullPool
    engine = create_engine(parsed, **kwargs)
    make_pg_sessions(engine, transaction_limits(LOCK_TIMEOUT_MS), statement_reads=statement_reads)
    _ping_after_idle(engine)
    return engine


def _ping_after_idle(engine: Engine) -> None:
    """Ping a pooled connection at checkout only when it was idle for a while.

    ``pool_pre_ping`` pings at every checkout: one round trip more for each of a run's
    short transactions. A connection given back a moment ago has just worked; one that
    waited in the pool may have been cut by a database restart, and is pinged (a failed
    ping makes the pool connect afresh).
    What this leaves: a restart within the last second breaks the first statement on a
    connection used just before it; that statement fails with OperationalError, which
    the runner retries and SQLAlchemy answers by invalidating the pool.
    """

    @event.listens_for(engine, "checkin")
    def _checkin(dbapi_connection: Any, connection_record: Any) -> None:
        connection_record.info["checked_in_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, connection_record: Any, connection_proxy: Any) -> None:
        checked_in_at = connection_record.info.pop("checked_in_at", None)
        if checked_in_at is None or time.monotonic() - checked_in_at < PING_AFTER_IDLE_SECONDS:
            return  # a new connection, or one that has just worked
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as error:
            raise exc.DisconnectionError(f"stale pooled connection: {error}") from error


class _TurnTakingConnection(sqlite3.Connection):
    """A SQLite connection whose write transactions take turns with the engine's others.

    SQLite has one writer at a time; a BEGIN IMMEDIATE that finds the lock taken sleeps
    in SQLite's busy handler (1, 2, 5, 10 ... ms) and tries again, so under contention a
    transaction of 0.1 ms waits milliseconds after the lock was free. Writers of one
    engine wait for their turn on a Python lock instead, handed over the moment the
    previous commit or rollback returns; other processes still meet the busy handler.
    """

    turns: threading.Lock  # one per engine (see _writer_turns)
    _has_turn = False

    def take_turn(self, timeout_ms: int) -> bool:
        """Wait (at most ``timeout_ms``) until this engine's previous writer has ended."""
        if not self._has_turn:
            if not self.turns.acquire(timeout=timeout_ms / 1000):
                return False
            self._has_turn = True
        return True

    def end_turn(self) -> None:
        """Let the next writer go (once this connection's transaction is over)."""
        if self._has_turn:
            self._has_turn = False
            self.turns.release()

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            if not self.in_transaction:
                self.end_turn()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self.end_turn()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.end_turn()

    def __del__(self) -> None:
        # Dropped without close (SQLite then ends its transaction): the turn ends too.
        self.end_turn()


def _writer_turns() -> type[_TurnTakingConnection]:
    """A connection class whose instances share one new writer lock (one per engine)."""
    return type("EngineConnection", (_TurnTakingConnection,), {"turns": threading.Lock()})


def _make_sqlite_immediate(engine: Engine, *, statement_reads: bool = False) -> None:
    """Make every SQLite transaction take the write lock at BEGIN.

    In WAL mode a transaction that reads and then writes fails at once with "database
    is locked" when another connection wrote in between; BEGIN IMMEDIATE makes it wait
    for the lock (busy timeout) instead, so read-then-write units of work are safe.
    Units of work that only read begin deferred, so a stalled writer cannot hold them up.
    """

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        if statement_reads:
            # No BEGIN is ever sent on these connections (see the begin event below): each
            # statement is its own read transaction, and none may write.
            cursor.execute("PRAGMA query_only=1")
        cursor.close()

    if statement_reads:
        return

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        # A read-only unit of work never blocks on (or behind) a writer in WAL mode, and
        # cannot write (query_only). Both pragmas are the pooled connection's own: each is
        # set when it differs from what the connection's last unit left (conn.info lives
        # as long as the DBAPI connection), so a reader's query_only never reaches a
        # writer, and the common writer sends no pragma at all.
        options = conn.get_execution_options()
        read_only = 1 if options.get(READ_ONLY) else 0
        busy_ms = LOCK_TIMEOUT_MS if options.get(SHORT_LOCK_WAIT) else SQLITE_BUSY_TIMEOUT_MS
        if conn.info.get("query_only", 0) != read_only:
            conn.exec_driver_sql(f"PRAGMA query_only={read_only}")
            conn.info["query_only"] = read_only
        if conn.info.get("busy_timeout_ms", SQLITE_BUSY_TIMEOUT_MS) != busy_ms:
            conn.exec_driver_sql(f"PRAGMA busy_timeout={busy_ms}")
            conn.info["busy_timeout_ms"] = busy_ms
        if read_only:
            conn.exec_driver_sql("BEGIN")
            return
        dbapi_connection = conn.connection.dbapi_connection
        if not dbapi_connection.take_turn(busy_ms):
            locked = sqlite3.OperationalError("database is locked")
            raise exc.OperationalError("BEGIN IMMEDIATE", None, locked)
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            dbapi_connection.end_turn()
            raise


def make_session_factory(engine: Engine) -> sessionmaker[Any]:
    """Sessions that never expire loaded state behind the caller's back."""
    return sessionmaker(bind=engine, expire_on_commit=False, future=True)
