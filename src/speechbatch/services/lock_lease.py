"""A background builder's hold on an organization-level lock: renewed, checked, released;
and the builder itself (an export's ZIP, a render), on a daemon thread of its own.

The builder calls ``renew()`` often (between pieces of work); it renews the grant once a
third of the lease has passed, in a short transaction of its own that also checks that
the row the grant fences (an export, a render) is still RUNNING under it. A database
blip is retried soon, since the lease has two more thirds to run; a grant that is gone
raises ``LeaseLost``, and the builder stops writing at once.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
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


class LeasedBuilder:
    """Builds one piece of work on a daemon thread while its ``lease`` is renewed: a lost
    grant stops it quietly (someone else owns the work now), any other failure is
    recorded by ``fail``. Subclasses say what ``build`` and ``fail`` do; each kind keeps
    its live builders in a ``builders`` set of its own (a process's stop waits for them)."""

    kind = "builder"  # in the thread's name and the logs
    builders: weakref.WeakSet[LeasedBuilder] = weakref.WeakSet()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.builders = weakref.WeakSet()

    def __init__(self, lease: LockLease, work_id: int) -> None:
        self.lease = lease
        self.work_id = work_id
        self.done = threading.Event()

    def start(self) -> None:
        """Build in a daemon thread."""
        self.builders.add(self)
        name = f"speechbatch-{self.kind}-{self.work_id}"
        threading.Thread(target=self.run, name=name, daemon=True).start()

    def run(self) -> None:
        """Build, then end the work COMPLETED or FAILED; never raise."""
        try:
            self.build()
        except LeaseLost:
            kind, lock_id = self.kind, self.lease.lock_id
            log.warning("%s fenced %s=%s lock=%s: stopped", kind, kind, self.work_id, lock_id)
            self.lease.release_quietly()
        except Exception as exc:
            log.exception("%s failed %s=%s", self.kind, self.kind, self.work_id)
            self.fail(f"{self.kind} failed: {exc}")
        finally:
            self.done.set()

    def build(self) -> None:
        """Do the work, renewing the lease between its pieces."""
        raise NotImplementedError

    def fail(self, message: str) -> None:
        """Record the work FAILED with ``message`` and release the lock."""
        raise NotImplementedError

    @classmethod
    def wait_for_all(cls, timeout: float) -> bool:
        """Wait until this process's builders of this kind have ended; whether they all
        did in time (nothing is interrupted: one cut off at exit stops renewing, and its
        work is recovered once the lease has run out)."""
        deadline = time.monotonic() + timeout
        for builder in list(cls.builders):
            if not builder.done.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True
