"""The runner's short transactions: retried while the database is unreachable."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from speechbatch.adapters.uow import RunUnit, RunUowFactory
from speechbatch.errors import DatabaseUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
# How long a run waits for an unreachable database before giving up on a write.
DB_RETRY_SECONDS = 60.0


class Transactions:
    """Runs one short transaction at a time for the runner's threads."""

    def __init__(self, uow_factory: RunUowFactory, stopping: Callable[[], bool]) -> None:
        self.uow_factory = uow_factory
        self._stopping = stopping

    def __call__(self, work: Callable[[RunUnit], T]) -> T:
        """Run ``work`` in one transaction and commit, retrying while the database is away.

        A paid-for result must survive a database restart, so a run waits for the
        database (up to DB_RETRY_SECONDS) rather than dropping the audio. Every write
        of the runner is a compare-and-set (a refund flips its reservation row), so a
        retry after a lost commit acknowledgement can at worst lose, never write twice.
        """
        delay = 0.25
        deadline = time.monotonic() + DB_RETRY_SECONDS
        while True:
            try:
                with self.uow_factory() as uow:
                    result = work(uow)
                    uow.commit()
                    return result
            except DatabaseUnavailable as exc:
                if time.monotonic() > deadline or self._stopping():
                    raise
                log.warning("database unavailable, retrying in %.1f s: %s", delay, exc.__cause__)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
