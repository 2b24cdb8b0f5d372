"""PostgreSQL notifications: one connection that LISTENs on a channel and hands each
NOTIFY's payload to a callback, reconnecting when the connection is lost.

A LISTEN belongs to a server session, so it needs a connection that is one: through a
pooler in transaction mode (PgBouncer) the session it ran in serves other clients a moment
later and the notifications never come back. Such a connection is recognised
(``postgres.through_pooler``) and not listened on: the process then wakes up by its polls alone,
and says so once in its log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from psycopg.conninfo import conninfo_to_dict

from speechbatch.adapters.postgres import through_pooler

log = logging.getLogger(__name__)

# The connections found to go through a pooler, each said once per process.
_said_polling: set[str] = set()
_said_lock = threading.Lock()


def listen(
    dsn: str,
    channel: str,
    *,
    on_notify: Callable[[str], None],
    on_listening: Callable[[], None],
    closed: threading.Event,
    wait_seconds: float,
) -> None:
    """Until ``closed`` is set: LISTEN on ``channel`` and call ``on_notify(payload)`` for
    every notification; ``on_listening()`` runs each time listening (re)starts, since a
    notification sent while not listening is lost. A lost connection is logged and
    opened again a second later. When ``dsn`` goes through a pooler, ``on_listening()``
    runs once and this returns: nothing will be notified, the caller's polls are all."""
    while not closed.is_set():
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                if through_pooler(conn):
                    _say_polling(dsn)
                    on_listening()
                    return
                conn.execute(f"LISTEN {channel}")
                on_listening()
                while not closed.is_set():
                    for note in conn.notifies(timeout=wait_seconds):
                        on_notify(note.payload)
        except Exception:
            log.warning("listener of %s lost its connection", channel, exc_info=True)
            closed.wait(1.0)


def _say_polling(dsn: str) -> None:
    """Log once per process and connection that LISTEN is not possible through it."""
    parts = conninfo_to_dict(dsn)
    where = f"{parts.get('host', 'localhost')}:{parts.get('port', 5432)}/{parts.get('dbname', '')}"
    with _said_lock:
        if where in _said_polling:
            return
        _said_polling.add(where)
    log.warning(
        "database %s goes through a pooler, where LISTEN receives nothing: this process "
        "polls instead; set SPEECHBATCH_LISTEN_DATABASE_URL to a direct connection to listen",
        where,
    )
