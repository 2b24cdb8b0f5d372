"""A background builder's hold on an organization-level lock: renewed, checked, released.

The builder calls ``renew()`` often (between pieces of work); it renews the grant once a
third of the lease has passed, in a short transaction of its own that also checks that
the row the grant fences (an export, a render) is still RUNNING under it. A database
blip is retried soon, since the lease has two more thirds to run; a grant that is gone
raises ``LeaseLost``, and the builder stops writing at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from speechbatch.adapters.uow import UowFactory, WriteUnit
from speechbatch.errors import DatabaseUnavailable

log = logging.getLogger(__name__)


class LeaseLost(Exception):
    """The grant expired, passed on, or its work was declared dead."""


class LockLease:
    """One grant held by one builder thread."""

    def __init__(
        self,
        uow_factory: UowFactory,
        lock_id: int,
        holder: str,
        ttl_seconds: float,
        still_running: Callable[[WriteUnit], bool],
    ) -> None:
        self._uow_factory = uow_factory
        self.lock_id = lock_id
        self.holder = holder
        self.ttl_seconds = ttl_seconds
        self._still_running = still_running
        self.renew_every = ttl_seconds / 3
        self._next_renew = time.monotonic() + self.renew_every

    def renew(self, *, force: bool = False) -> None:
        """Renew the grant when a third of the lease has passed (or now, with ``force``);
        raise LeaseLost if it is gone."""
        now = time.monotonic()
        if not force and now < self._next_renew:
            return
        try:
            with self._uow_factory() as uow:
                won = uow.locks.renew(
                    self.lock_id, self.holder, self.ttl_seconds
                ) and self._still_running(uow)
                if won:
                    uow.commit()
        except DatabaseUnavailable:
            log.warning("lock %s could not be renewed", self.lock_id, exc_info=True)
            self._next_renew = now + min(1.0, self.renew_every / 3)
            return
        if not won:
            raise LeaseLost()
        self._next_renew = now + self.renew_every

    def release_quietly(self) -> None:
        """Release this grant if still unreleased; the id never touches another one."""
        try:
            with self._uow_factory() as uow:
                uow.locks.release(self.lock_id)
                uow.commit()
        except Exception:
            log.exception("could not release lock %s", self.lock_id)
