"""Worker processes: one row per process start, and its heartbeat."""

from __future__ import annotations

from typing import Protocol

from sqlalchemy import insert, update
from sqlalchemy.orm import Session

from speechbatch.adapters.db import db_now
from speechbatch.adapters.repositories.tables import workers


class Workers(Protocol):
    """What the worker identity needs."""

    def register_worker(self, hostname: str, pid: int) -> int: ...
    def heartbeat_worker(self, worker_id: int) -> None: ...
    def mark_worker_stopped(self, worker_id: int) -> None: ...


class WorkersRepository:
    """Worker rows over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def register_worker(self, hostname: str, pid: int) -> int:
        """Register a new process start; every start is a new identity."""
        return int(
            self.session.execute(
                insert(workers).values(hostname=hostname, pid=pid).returning(workers.c.id)
            ).scalar_one()
        )

    def heartbeat_worker(self, worker_id: int) -> None:
        """Stamp a worker's heartbeat with the database's clock."""
        self.session.execute(
            update(workers).where(workers.c.id == worker_id).values(heartbeat_at=db_now())
        )

    def mark_worker_stopped(self, worker_id: int) -> None:
        """Record that a worker stopped on purpose."""
        self.session.execute(
            update(workers).where(workers.c.id == worker_id).values(stopped_at=db_now())
        )
