"""The runner's short transactions: retried while the database is unreachable."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from speechbatch.adapters.uow import RunUnit, RunUowFactory
from speechbatch.errors import DatabaseUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Rollback(Generic[T]):
    """What a unit of work answers when its writes must not be kept: ``value`` is the
    answer, and the transaction is rolled back instead of committed."""

    value: T


class Transactions:
    """Runs one short transaction at a time for the runner's threads."""

    def __init__(
        self, uow_factory: RunUowFactory, stopping: Callable[[], bool], retry_seconds: float
    ) -> None:
        self.uow_factory = uow_factory
        self._stopping = stopping
        self.retry_seconds = retry_seconds
        self._owed: list[Callable[[RunUnit], object]] = []
        self._owed_lock = threading.Lock()

    def owe(self, work: Callable[[RunUnit], object]) -> None:
        """Keep a give-back (a refund, a slot's release) whose transaction the database
        refused for longer than ``retry_seconds``, for ``pay_owed`` to run again: the
        characters of a call never sent are given back once the database returns, not
        left billed. The work must be compare-and-sets (it may run after a lost
        acknowledgement of its own)."""
        with self._owed_lock:
            self._owed.append(work)

    def pay_owed(self) -> int:
        """Run every owed give-back once (the background tick's turn); how many are left."""
        with self._owed_lock:
            owed, self._owed = self._owed, []
        left = []
        for work in owed:
            try:
                with self.uow_factory() as uow:
                    work(uow)
                    uow.commit()
            except DatabaseUnavailable:
                left.append(work)
        with self._owed_lock:
            self._owed.extend(left)
            return len(self._owed)

    def __call__(self, work: Callable[[RunUnit], T | Rollback[T]]) -> T:
        """Run ``work`` in one transaction and commit (or roll back when it answers a
        ``Rollback``), retrying while the database is away.

        A paid-for result must survive a database restart, so a run waits for the
        database (up to ``retry_seconds``, SPEECHBATCH_DB_RETRY_SECONDS) rather than
        dropping the audio; after that DatabaseUnavailable gives the unit of work up.
        Every write of the runner is a compare-and-set (a refund flips its reservation
        row), so a retry after a lost commit acknowledgement can at worst lose, never
        write twice; what a lost one may have made current is never deleted on a guess.
        """
        delay = 0.25
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                with self.uow_factory() as uow:
                    result = work(uow)
                    if isinstance(result, Rollback):
                        return result.value
                    uow.commit()
                    return result
            except DatabaseUnavailable as exc:
                if time.monotonic() > deadline or self._stopping():
                    raise
                log.warning("database unavailable, retrying in %.1f s: %s", delay, exc.__cause__)
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 5.0)
