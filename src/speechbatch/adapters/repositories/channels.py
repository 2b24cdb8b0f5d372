"""What the repositories tell the waiters of every process (PostgreSQL's NOTIFY, sent
when the telling transaction commits; see ``runner/gate.py``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, case, func

# The channel of the provider slots: a release notifies it (with its job's id).
SLOT_CHANNEL = "speechbatch_slots"
# The payload that says fair shares may have grown (a job sent its last startable item,
# or a run ended): waiters at their share try again.
SHARE_PAYLOAD = "share"


def share_notice(dialect: str, when: ColumnElement[bool] | None = None) -> list[Any]:
    """On PostgreSQL, a RETURNING column that notifies the waiters of every process, at
    commit, that fair shares may have grown (only ``when`` that holds); nothing on SQLite."""
    if dialect != "postgresql":
        return []
    notify = func.pg_notify(SLOT_CHANNEL, SHARE_PAYLOAD)
    return [notify if when is None else case((when, notify))]
