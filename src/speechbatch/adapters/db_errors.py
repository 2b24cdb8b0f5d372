"""Driver errors as the project's own: what leaves a unit of work is never
``sqlalchemy.exc`` (callers catch ``DatabaseUnavailable`` or ``AlreadyExists``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc

from speechbatch.adapters.repositories.job_locks import is_unique_violation
from speechbatch.errors import AlreadyExists, DatabaseError, DatabaseUnavailable, SpeechbatchError

# What the driver and the pool raise; everything else leaves a unit of work untouched.
DRIVER_ERRORS = (sa_exc.DBAPIError, sa_exc.DisconnectionError, sa_exc.TimeoutError)


def database_error(error: sa_exc.SQLAlchemyError) -> SpeechbatchError:
    """The project's error for a driver or pool error (raise it ``from`` the original).

    Unreachable, restarting, timed out or busy (a lock or statement timeout, SQLite's
    "database is locked", an exhausted pool): DatabaseUnavailable, worth a retry. So is
    any error that cost the connection, whatever its class: PostgreSQL ends a session
    idle in a transaction past idle_in_transaction_session_timeout with 25P03, which
    psycopg raises as an InternalError, yet the transaction was only rolled back and a
    new connection may try again (a process that stalled, or was frozen, mid-transaction
    must learn on waking that its run is fenced, not fail it). A unique violation:
    AlreadyExists. Anything else the database refused: DatabaseError.
    """
    if isinstance(error, sa_exc.IntegrityError) and is_unique_violation(error):
        return AlreadyExists()
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return DatabaseUnavailable()
    if isinstance(
        error,
        sa_exc.OperationalError
        | sa_exc.InterfaceError
        | sa_exc.DisconnectionError
        | sa_exc.TimeoutError,
    ):
        return DatabaseUnavailable()
    return DatabaseError()


@contextmanager
def translated() -> Iterator[None]:
    """Driver errors raised in the block leave it as the project's (see ``database_error``)."""
    try:
        yield
    except DRIVER_ERRORS as error:
        raise database_error(error) from error
