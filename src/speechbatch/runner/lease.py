"""A background builder's hold on an organization-level lock: renewed, checked, released;
and the builder itself (an export's ZIP, a render), on a daemon thread of its own.

The builder calls ``renew()`` often (between pieces of work); it renews the grant once a
third of the lease has passed, in a short transaction of its own that also checks that
the row the grant fences (an export, a render) is still RUNNING under it. A database
blip is retried soon, since the lease has two more thirds to run; a grant that is gone
raises ``LeaseLost``, and the builder stops writing at once.

Nothing is deleted on a guess. A transaction whose commit acknowledgement was lost may
have happened: the completion that made the published files current, or the failure that
made them nobody's. So the builder's end deletes a published file only after a read shows
that nothing refers to it, and that read always follows a compare-and-set on the work's
row that settled it (a completion that lost, a failure that committed): on PostgreSQL
that UPDATE waits for any earlier transaction still holding the row. When the outcome
stays unknown, the files stay, for ``gc`` to judge later.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from speechbatch.adapters.uow import UowFactory, WriteUnit
from speechbatch.errors import DatabaseUnavailable
from speechbatch.services.ports import Storage

log = logging.getLogger(__name__)

# The first wait before a settling transaction is tried again; it doubles up to the cap.
SETTLE_RETRY_SECONDS = 0.1
SETTLE_RETRY_CAP_SECONDS = 5.0


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
        # Until when a settling transaction is worth retrying: past it the lease may
        # have run out, and the grant's fence (the database's clock) decides anyway.
        self._held_until = time.monotonic() + ttl_seconds

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
        self._held_until = now + self.ttl_seconds

    def settle(self, end: Callable[[WriteUnit], bool]) -> bool:
        """Run ``end`` (a fenced compare-and-set that ends the work) in a transaction
        that commits when it wins; whether it won. Retried while the database is
        unreachable and the grant may still be ours; then DatabaseUnavailable.

        A retry after a lost acknowledgement loses, since the first one won: the caller
        tells the two apart by reading what the work's row refers to."""
        delay = SETTLE_RETRY_SECONDS
        while True:
            try:
                with self._uow_factory() as uow:
                    won = end(uow)
                    if won:
                        uow.commit()
                    return won
            except DatabaseUnavailable:
                if time.monotonic() + delay >= self._held_until:
                    raise
                log.warning("lock %s: ending its work, retrying", self.lock_id, exc_info=True)
                time.sleep(delay)
                delay = min(delay * 2, SETTLE_RETRY_CAP_SECONDS)

    def release_quietly(self) -> None:
        """Release this grant if still unreleased; the id never touches another one."""
        try:
            with self._uow_factory() as uow:
                uow.locks.release(self.lock_id)
                uow.commit()
        except Exception:
            log.exception("could not release lock %s", self.lock_id)


class LeasedBuilder:
    """Builds one piece of work on a daemon thread while its ``lease`` is renewed, and
    ends it: COMPLETED by ``complete`` (from ``build``), FAILED by ``end_failed`` after
    any failure, or stopped quietly when the grant is lost (someone else owns the work
    now). Files go to the storage through ``publish``; after an end that leaves them
    unreferenced, they are deleted as the module's docstring says. Each kind keeps its
    live builders in a ``builders`` set of its own (a process's stop waits for them)."""

    kind = "builder"  # in the thread's name and the logs
    builders: weakref.WeakSet[LeasedBuilder] = weakref.WeakSet()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.builders = weakref.WeakSet()

    def __init__(
        self,
        uow_factory: UowFactory,
        storage: Storage,
        work_id: int,
        *,
        lock_id: int,
        holder: str,
        ttl_seconds: float,
    ) -> None:
        self._uow_factory = uow_factory
        self._storage = storage
        self.work_id = work_id
        self.lease = LockLease(uow_factory, lock_id, holder, ttl_seconds, self.still_running)
        self.done = threading.Event()
        # Every key an upload was tried for: one that reported a failure may have landed.
        self.published: list[str] = []

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
            self._drop_unreferenced()
        except Exception as exc:
            log.exception("%s failed %s=%s", self.kind, self.kind, self.work_id)
            if self._fail(f"{self.kind} failed: {exc}"):
                self._drop_unreferenced()
        finally:
            self.done.set()

    def publish(self, key: str, source: Path) -> None:
        """Store ``source`` under ``key`` (whole or not at all) as a file of the work."""
        self.published.append(key)
        self._storage.write_file(key, source)

    def complete(self, end: Callable[[WriteUnit], bool]) -> None:
        """End the work COMPLETED with ``end`` (its fenced compare-and-set, which also
        releases the grant and records the event; whether it won). Raises LeaseLost when
        the work was declared dead or its lock passed on before it could."""
        if self.lease.settle(end):
            return
        with self._uow_factory(read_only=True) as uow:
            referenced = uow.spending.referenced_keys(self.published)
        if self.published and referenced == set(self.published):
            return  # an earlier try completed it: its acknowledgement was lost
        raise LeaseLost()

    def _fail(self, message: str) -> bool:
        """Record the work FAILED (unless it has ended) and release the lock; whether
        that is known to have committed."""
        try:
            with self._uow_factory() as uow:
                self.end_failed(uow, message)
                uow.locks.release(self.lease.lock_id)
                uow.commit()
        except Exception:
            # Recovery finds it once the lease has run out.
            log.exception("could not record the failure of %s %s", self.kind, self.work_id)
            return False
        return True

    def _drop_unreferenced(self) -> None:
        """Delete the published files that nothing refers to now that the work ended
        without them; on any doubt they stay, for gc."""
        if not self.published:
            return
        try:
            with self._uow_factory(read_only=True) as uow:
                referenced = uow.spending.referenced_keys(self.published)
            for key in self.published:
                if key not in referenced:
                    self._storage.delete(key)
        except Exception:
            log.warning("%s %s: files left for gc", self.kind, self.work_id, exc_info=True)

    def still_running(self, uow: WriteUnit) -> bool:
        """Whether the work is still RUNNING under this builder's grant."""
        raise NotImplementedError

    def build(self) -> None:
        """Do the work, renewing the lease between its pieces, and ``complete`` it."""
        raise NotImplementedError

    def end_failed(self, uow: WriteUnit, message: str) -> None:
        """In ``uow``: end the work FAILED with ``message`` if it is still RUNNING under
        this grant (a compare-and-set), and record its event if so."""
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
