"""PostgreSQL connections, directly or through a pooler in transaction mode (PgBouncer).

A direct connection is one server session for its whole life. A pooler in transaction
mode hands a server session to whichever client has a transaction, so nothing the app
needs may outlive one there: no session settings, no prepared statement (one prepared on
one server session would be looked for on another, or found there under another
statement's name), no LISTEN. Each connection is told apart when it opens
(``through_pooler``) and set up for what it goes through (``make_pg_sessions``).
"""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy import Engine, event
from sqlalchemy.engine import URL, make_url

from speechbatch.errors import ConfigError

# Key in a pooled connection's info: it reaches PostgreSQL through a pooler.
THROUGH_POOLER = "speechbatch_through_pooler"


def through_pooler(connection: psycopg.Connection[Any]) -> bool:
    """Whether ``connection`` reaches PostgreSQL through a pooler that hands server sessions
    around (PgBouncer): at the start PostgreSQL gives a client its server process's id (the
    key of a cancel request), and such a pooler gives a key of its own instead. Sends one
    statement (in a transaction, unless the connection is in autocommit)."""
    row = connection.execute("SELECT pg_backend_pid()").fetchone()
    return row is None or row[0] != connection.info.backend_pid


def transaction_limits(lock_timeout_ms: int) -> dict[str, str]:
    """What every transaction runs under: a read's recovery waits for a row at most
    ``lock_timeout_ms``, and a transaction that a frozen process left open cannot hold a
    job's row for long."""
    return {
        "lock_timeout": f"{lock_timeout_ms}ms",
        "statement_timeout": "30s",
        "idle_in_transaction_session_timeout": "10s",
    }


def _settings_statement(settings: dict[str, str], *, local: bool) -> str:
    """One SELECT that sets each of ``settings`` (this module's constants, never input)
    for the transaction (``local``) or for the session."""
    scope = "true" if local else "false"
    return "SELECT " + ", ".join(
        f"set_config('{name}', '{value}', {scope})" for name, value in settings.items()
    )


def make_pg_sessions(engine: Engine, limits: dict[str, str], *, statement_reads: bool) -> None:
    """Run every transaction of ``engine`` under ``limits`` (and a statement reader's read
    only), directly or through a pooler.

    Directly, the settings are set once, for the session, when a connection opens, and
    psycopg prepares what it runs often (the polls' large statements are not planned again
    at every run). Through a pooler each transaction sets them for itself (one round trip
    more), a statement reader's unit is a read-only transaction (its connections are in
    autocommit: the BEGIN below opens it, the unit's COMMIT or ROLLBACK closes it), and
    nothing is prepared.
    """
    session_settings = dict(limits)
    if statement_reads:
        session_settings["default_transaction_read_only"] = "on"
    for_session = _settings_statement(session_settings, local=False)
    for_transaction = _settings_statement(limits, local=True)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, connection_record: Any) -> None:
        pooled = through_pooler(dbapi_connection)
        connection_record.info[THROUGH_POOLER] = pooled
        if pooled:
            dbapi_connection.prepare_threshold = None
        else:
            dbapi_connection.execute(for_session)
        dbapi_connection.commit()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        if not conn.info.get(THROUGH_POOLER):
            return
        if statement_reads:
            conn.exec_driver_sql("BEGIN READ ONLY")
        conn.exec_driver_sql(for_transaction)


def driver_arguments(url: URL) -> tuple[URL, dict[str, Any]]:
    """The URL without the query parameters that psycopg takes as typed keywords, and
    those keywords: SQLAlchemy would pass ``prepare_threshold`` on as a string."""
    value = url.query.get("prepare_threshold")
    if value is None:
        return url, {}
    if not isinstance(value, str):
        raise ConfigError("prepare_threshold is given more than once in the database URL")
    threshold: int | None
    if value.strip().lower() == "none":
        threshold = None
    else:
        try:
            threshold = int(value)
        except ValueError:
            raise ConfigError(
                f"prepare_threshold in the database URL must be a number or none, not {value!r}"
            ) from None
    return url.difference_update_query(["prepare_threshold"]), {"prepare_threshold": threshold}


def libpq_url(url: str) -> str:
    """A PostgreSQL URL as psycopg's own ``connect`` takes it (a connection of its own, for
    LISTEN): no SQLAlchemy driver name, none of the query parameters handled above."""
    parsed, _ = driver_arguments(make_url(url))
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)
