"""PostgreSQL notifications: one connection that LISTENs on a channel and hands each
NOTIFY's payload to a callback, reconnecting when the connection is lost."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg

log = logging.getLogger(__name__)


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
    opened again a second later."""
    while not closed.is_set():
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"LISTEN {channel}")
                on_listening()
                while not closed.is_set():
                    for note in conn.notifies(timeout=wait_seconds):
                        on_notify(note.payload)
        except Exception:
            log.warning("listener of %s lost its connection", channel, exc_info=True)
            closed.wait(1.0)
