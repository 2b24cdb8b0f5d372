"""The provider gate: deployment-wide slots, the pace, and waking those who wait.

A slot is a row of ``provider_slots`` taken by one compare-and-set (reclaim-or-insert,
see ``repositories/slots.py``) inside an item's start transaction, and given back in
its finish transaction; a dead holder's slot comes back without a sweeper. Fairness is
the acquire's SQL rule: a job takes a slot only while under its fair share.

An item that found no slot waits here until a slot is released somewhere:
- a release in this process wakes its waiters directly (``released``);
- on PostgreSQL every release notifies ``SLOT_CHANNEL`` in its transaction, and one
  listener thread per process (its own connection, ``LISTEN``) wakes the waiters when
  a release of any process commits;
- a slow poll (``POLL_SECONDS``) is the fallback: SQLite across processes, a lost
  notification, a fair share grown because another job ended.
A waiter whose job holds its fair share waits only for a release of its own job's slots,
or for the share to grow: a job sent its last startable item, or a run ended (in this
process directly; on PostgreSQL by a ``share`` notification in that same statement).

The pace (``PROVIDER_RPM``) books start times on one row on the database's clock, and a
429's Retry-After pushes that row forward, pausing new calls across the deployment.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import NamedTuple, Protocol, TypeVar

from speechbatch.adapters.notifications import listen
from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.providers.registry import ProviderSet
from speechbatch.adapters.repositories.channels import SHARE_PAYLOAD, SLOT_CHANNEL
from speechbatch.adapters.repositories.slots import PACE_ROW, SlotGrant, SlotRepository
from speechbatch.config import PROVIDERS, Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

# The fallback: how long a waiter waits for a wake-up before it asks again anyway.
POLL_SECONDS = 0.5
# How long the listener waits for a notification before it checks whether to stop.
LISTEN_WAIT_SECONDS = 0.5
# Waits shorter than this are not worth a write to say so.
VISIBLE_WAIT_SECONDS = 0.25
# How long this process trusts what it last read of a 429 pause (when RPM is 0).
PAUSE_CACHE_SECONDS = 0.5


class SlotTx(Protocol):
    """Runs ``work`` in one short transaction (retrying while the database is away)."""

    def __call__(self, work: Callable[[SlotRepository], T]) -> T: ...


class Mark(NamedTuple):
    """What a waiter had seen before its try: releases (all, its job's) and share changes."""

    releases: int
    job_releases: int
    shares: int


class Lane(NamedTuple):
    """One provider's share of the deployment: its slots (numbers ``first`` ..
    ``first + capacity - 1``), its pace (RPM, 0: none) and the pace's row."""

    capacity: int
    rpm: int
    first: int = 0
    pace_row: int = PACE_ROW
    # Whose jobs share its slots: (own voice prefix, other providers' prefixes).
    sharing: tuple[str, tuple[str, ...]] = ("", ())


class ProviderGate:
    """This process's access to the deployment's provider slots and pace (of one
    provider: ``lane``, by default the deployment-wide settings)."""

    def __init__(
        self,
        tx: SlotTx,
        settings: Settings,
        worker_id: Callable[[], int],
        listen_dsn: str | None = None,
        lane: Lane | None = None,
    ) -> None:
        self._tx = tx
        self.settings = settings
        self.lane = lane or Lane(settings.provider_concurrency, settings.provider_rpm)
        self._worker_id = worker_id
        # Counts of releases seen (all, and per job), under _changed.
        self._changed = threading.Condition()
        self._releases = 0
        self._job_releases: defaultdict[int, int] = defaultdict(int)
        self._shares = 0
        # Releases not yet taken up by a waiter (capped at the slots): one release lets
        # one waiter of this process try, not all of them (the others would only lose).
        self._unclaimed = 0
        self._job_unclaimed: defaultdict[int, int] = defaultdict(int)
        self._listen_dsn = listen_dsn
        self._listener: threading.Thread | None = None
        self._closed = threading.Event()
        self._pause_lock = threading.Lock()
        self._paused_until = 0.0  # time.monotonic() until which starts are paused
        self._pause_checked_at = float("-inf")

    @property
    def max_hold_seconds(self) -> float:
        """A slot held longer than any call lasts lost its release: it counts as free."""
        return self.settings.tts_timeout_seconds + self.settings.worker_dead_seconds + 5.0

    def _limits(self) -> dict[str, float]:
        return {
            "capacity": self.lane.capacity,
            "worker_dead_seconds": self.settings.worker_dead_seconds,
            "max_hold_seconds": self.max_hold_seconds,
        }

    # Slots, inside the caller's transaction.

    def take(self, slots: SlotRepository, job_id: int, attempt: int) -> SlotGrant | None:
        """One try for a slot in the caller's transaction (an item's start); None when
        none is free for this job (or the run is fenced)."""
        return slots.acquire_slot(
            self._worker_id(),
            job_id,
            attempt,
            capacity=self.lane.capacity,
            worker_dead_seconds=self.settings.worker_dead_seconds,
            max_hold_seconds=self.max_hold_seconds,
            first=self.lane.first,
            sharing=self.lane.sharing,
        )

    def holds_its_share(self, slots: SlotRepository, job_id: int) -> bool:
        """Whether the job holds its fair share now (only its own releases help it)."""
        return slots.holds_its_share(
            job_id,
            capacity=self.lane.capacity,
            worker_dead_seconds=self.settings.worker_dead_seconds,
            max_hold_seconds=self.max_hold_seconds,
            first=self.lane.first,
            sharing=self.lane.sharing,
        )

    def release(self, grant: SlotGrant, job_id: int, *, lane_goes_on: bool = False) -> None:
        """Give a slot back in a transaction of its own (its call's answer came), then
        wake the waiters (see ``released``)."""
        try:
            self._tx(lambda slots: slots.release_slot(grant, job_id))
        except Exception:
            # The slot comes back anyway after max_hold_seconds.
            log.exception("could not release provider slot %s", grant.slot)
        self.released(job_id, lane_goes_on=lane_goes_on)

    # Waiting for a release.

    def mark(self, job_id: int) -> Mark:
        """What was seen so far; take it BEFORE a try, pass it to ``wait``."""
        self._ensure_listener()
        with self._changed:
            return Mark(self._releases, self._job_releases[job_id], self._shares)

    def released(self, job_id: int | None = None, *, lane_goes_on: bool = False) -> None:
        """A slot (of ``job_id``, if known) was given back and committed: wake waiters.

        ``lane_goes_on``: the item thread that gave it back goes on to its job's next
        item at once, so the job's own waiters (at its fair share) are not woken for it:
        they would only race that thread. They are woken when a thread of the job stops
        (``lane_ended``), and by the poll."""
        cap = self.lane.capacity
        with self._changed:
            self._releases += 1
            self._unclaimed = min(self._unclaimed + 1, cap)
            if job_id is not None and not lane_goes_on:
                self._job_releases[job_id] += 1
                self._job_unclaimed[job_id] = min(self._job_unclaimed[job_id] + 1, cap)
            self._changed.notify_all()

    def lane_ended(self, job_id: int) -> None:
        """A thread of the job stopped taking items: its job's waiters may use its share."""
        self.released(job_id)

    def share_changed(self) -> None:
        """Fair shares may have grown (a job sent its last startable item, or a run
        ended): every waiter at its share tries again."""
        with self._changed:
            self._shares += 1
            self._changed.notify_all()

    def wait(self, mark: Mark, job_id: int, at_share: bool) -> bool:
        """Wait for a release after ``mark`` (``at_share``: one of the job's own, or a
        share change), at most POLL_SECONDS; whether one came. Each release is taken up
        by one waiter of this process (the one that then tries), so a release does not
        send every waiter to the database at once."""

        def came() -> bool:
            if self._closed.is_set():
                return True
            if at_share:
                if self._shares != mark.shares:
                    return True
                if (
                    self._job_releases[job_id] == mark.job_releases
                    or not self._job_unclaimed[job_id]
                ):
                    return False
                self._job_unclaimed[job_id] -= 1
                return True
            if self._releases == mark.releases or not self._unclaimed:
                return False
            self._unclaimed -= 1
            return True

        with self._changed:
            return self._changed.wait_for(came, timeout=POLL_SECONDS)

    def close(self) -> None:
        """Stop the listener and wake every waiter (this process is stopping)."""
        self._closed.set()
        with self._changed:
            self._changed.notify_all()
        listener = self._listener
        if listener is not None and listener is not threading.current_thread():
            listener.join(2.0)  # it notices within its 1 s wait for notifications

    def _ensure_listener(self) -> None:
        if self._listen_dsn is None or self._listener is not None or self._closed.is_set():
            return
        with self._changed:
            if self._listener is not None:
                return
            self._listener = threading.Thread(
                target=self._listen, name="speechbatch-slot-listener", daemon=True
            )
            self._listener.start()

    def _listen(self) -> None:
        """PostgreSQL: wake this process's waiters at every committed release (a release
        may have come while not listening: wake them then too)."""
        assert self._listen_dsn is not None
        listen(
            self._listen_dsn,
            SLOT_CHANNEL,
            # Another process's release (or this one's, echoed): a job's slots are all
            # held by the process that runs it, so only waiters below their share care.
            on_notify=self._notified,
            on_listening=self.released,
            closed=self._closed,
            wait_seconds=LISTEN_WAIT_SECONDS,
        )

    def _notified(self, payload: str) -> None:
        if payload == SHARE_PAYLOAD:
            self.share_changed()
        else:
            self.released()

    # The pace.

    def pause(self, seconds: float) -> None:
        """Pause new starts across the deployment for ``seconds`` (a 429's Retry-After)."""
        try:
            self._tx(lambda slots: slots.pause_starts(seconds, self.lane.pace_row))
        except Exception:
            log.exception("could not pause provider starts")
        with self._pause_lock:
            self._paused_until = max(self._paused_until, time.monotonic() + seconds)
        log.warning("provider asked to wait %.1f s: new calls paused deployment-wide", seconds)

    def _pause_left(self) -> float:
        """Seconds left of a deployment-wide pause (read at most every PAUSE_CACHE_SECONDS)."""
        now = time.monotonic()
        with self._pause_lock:
            if now - self._pause_checked_at < PAUSE_CACHE_SECONDS:
                return max(0.0, self._paused_until - now)
            self._pause_checked_at = now
        seconds = self._tx(lambda slots: slots.paused_for(self.lane.pace_row))
        with self._pause_lock:
            self._paused_until = max(self._paused_until, now + seconds)
            return max(0.0, self._paused_until - now)

    def wait_for_pace(self, stopping: Callable[[], bool], waiting: Waiting) -> bool:
        """Wait until a call may start: the deployment's pace (RPM) and any 429 pause;
        False when the run began to stop meanwhile."""
        rpm, row = self.lane.rpm, self.lane.pace_row
        while True:
            if rpm > 0:
                answer = self._tx(lambda slots: slots.reserve_start(60.0 / rpm, row))
                wait = answer.wait_seconds
                if wait is not None:
                    if wait > 0:
                        waiting.set("pace" if wait > VISIBLE_WAIT_SECONDS else None)
                        return sleep_unless(wait, stopping)
                    return True
                left = max(0.05, min(answer.paused_for_seconds, 1.0))
            else:
                left = self._pause_left()
                if left <= 0:
                    return True
            waiting.set("pace")
            if not sleep_unless(min(left, 1.0), stopping):
                return False


# count_waiting(reason, delta): add delta to the run's count of items waiting for reason.
WaitCounter = Callable[[str, int], None]


class Waiting:
    """Counts one item on its run's row while it waits longer than a moment, and why."""

    def __init__(self, count: WaitCounter) -> None:
        self._count = count
        self._since = time.monotonic()
        self._shown: str | None = None

    def set(self, reason: str | None) -> None:
        """Show the item as waiting for ``reason`` ("slot", "pace"; None: not waiting)."""
        if reason is not None and time.monotonic() - self._since < VISIBLE_WAIT_SECONDS:
            return
        if reason == self._shown:
            return
        try:
            if self._shown is not None:
                self._count(self._shown, -1)
            if reason is not None:
                self._count(reason, 1)
            self._shown = reason
        except Exception:
            # Only a display: never let it stop a call.
            log.warning("could not count a waiting item", exc_info=True)

    def done(self) -> None:
        """The item no longer waits."""
        self.set(None)


def sleep_unless(seconds: float, stopping: Callable[[], bool]) -> bool:
    """Sleep ``seconds``, or stop early (looking every 0.1 s at most) when ``stopping``
    says so; whether it slept the whole time."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if stopping():
            return False
        time.sleep(min(left, 0.1))
    return not stopping()


# Slot numbers of a provider other than the default start at (1 + its index in
# config.PROVIDERS) x SLOT_RANGE: every provider's slots apart, and the default's where a
# deployment of one provider has always had them (from 0).
SLOT_RANGE = 100_000


def lane_of(settings: Settings, name: str) -> Lane:
    """The lane of provider ``name``: its own concurrency and RPM, its slots and pace
    row, and the jobs that share them (by their voice's prefix)."""
    capacity, rpm, _ = settings.limit_of(name)
    others = tuple(f"{p}:" for p in settings.providers if p != settings.tts_provider)
    if name == settings.tts_provider:
        return Lane(capacity, rpm, sharing=("", others))
    index = PROVIDERS.index(name) if name in PROVIDERS else len(PROVIDERS)
    first, row = (1 + index) * SLOT_RANGE, PACE_ROW + 1 + index
    return Lane(capacity, rpm, first, row, (f"{name}:", ()))


def provider_gates(
    provider: TTSProvider,
    tx: SlotTx,
    settings: Settings,
    worker_id: Callable[[], int],
    listen_dsn: str | None,
) -> tuple[ProviderGate, dict[str, ProviderGate]]:
    """The default provider's gate, and one for each other provider of a set, so that a
    slow provider never holds another's slots."""
    default = ProviderGate(
        tx, settings, worker_id, listen_dsn, lane_of(settings, settings.tts_provider)
    )
    names = list(provider.providers) if isinstance(provider, ProviderSet) else []
    return default, {
        name: ProviderGate(tx, settings, worker_id, listen_dsn, lane_of(settings, name))
        for name in names
        if name != provider.name
    }
