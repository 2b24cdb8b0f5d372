"""The runner's side of the deployment-wide provider slots and pace.

Before each provider call a run's thread takes a slot (one compare-and-set statement,
see ``repositories/slots.py``) and, with ``PROVIDER_RPM`` set, books a start time on the
pace row; the slot is released when the call ends. When a slot is free, the item's own
start transaction takes it (``try_within``) and its finish transaction gives it back,
so the common item pays no transaction for its slot; a failed call gives it back at
once, and an item that must wait for a slot (or is retried) takes one in a transaction
of its own. Nothing is held across the call but the slot row's lease, which a dead
process loses by ceasing to heartbeat. A 429 with Retry-After pushes the pace row
forward, pausing new starts across the deployment.

Waiting polls the database (slots can be freed by any process), one thread per job and
one statement at a time per process; a release in this process wakes one poller that can
use the slot at once, and rides in the acquire statement that the wake-up starts (see
``release`` and ``_poll``). An item that waits longer than a moment is counted on its
run's row, so the job's JSON and page can say why it is slow.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, TypedDict, TypeVar

from .config import Settings
from .providers.base import RetryableProviderError, TTSProvider
from .repositories.riders import Rider
from .repositories.slots import SlotGrant, SlotRepository

log = logging.getLogger(__name__)
T = TypeVar("T")

# Waits shorter than this are not worth a write to say so.
VISIBLE_WAIT_SECONDS = 0.25
# Longest sleep between two tries for a slot (a release in this process wakes at once).
MAX_POLL_SECONDS = 0.2
# How long this process trusts what it last read of a 429 pause (when RPM is 0).
PAUSE_CACHE_SECONDS = 0.5


class SlotTx(Protocol):
    """Runs ``work`` in one short transaction (retrying while the database is away)."""

    def __call__(self, work: Callable[[SlotRepository], T]) -> T: ...


class _Limits(TypedDict):
    """The settings every slot statement is given (keyword arguments)."""

    capacity: int
    worker_dead_seconds: float
    max_hold_seconds: float


class CallNotStarted(Exception):
    """The run began to stop (drain, budget, cancel) while waiting for a slot or the pace."""


class ProviderGate:
    """This process's access to the deployment's provider slots and pace."""

    def __init__(self, tx: SlotTx, settings: Settings, worker_id: Callable[[], int]) -> None:
        self._tx = tx
        self.settings = settings
        self._worker_id = worker_id
        # Per job: held by the one thread of this process that asks the database for a
        # slot for that job, and how many threads of the job are waiting.
        self._heads: dict[int, tuple[threading.Lock, int]] = {}
        self._heads_guard = threading.Lock()
        # Held while this process's one acquire statement is in flight (see _poll).
        self._asking = threading.Lock()
        # Slots given back while threads of this process wait: the next acquire
        # transaction releases them (see release). Guarded by _heads_guard.
        self._deferred: list[SlotGrant] = []
        # Per job that has waiters, guarded by _wake: its poller (see _poll), how many of
        # its slots were released, and that count when the job was found holding its
        # fair share (by a grant or a refusal): its next poller waits for one of its
        # releases before it asks.
        self._wake = threading.Lock()
        self._pollers: dict[int, _Poller] = {}
        self._job_releases: dict[int, int] = {}
        self._at_share: dict[int, int] = {}
        self._pause_lock = threading.Lock()
        self._paused_until = 0.0  # time.monotonic() until which starts are paused
        self._pause_checked_at = float("-inf")

    @property
    def max_hold_seconds(self) -> float:
        """A slot held longer than any call lasts lost its release: it counts as free."""
        return self.settings.tts_timeout_seconds + self.settings.worker_dead_seconds + 5.0

    def _limits(self) -> _Limits:
        return {
            "capacity": self.settings.provider_concurrency,
            "worker_dead_seconds": self.settings.worker_dead_seconds,
            "max_hold_seconds": self.max_hold_seconds,
        }

    def _acquire_slot(
        self, slots: SlotRepository, job_id: int, attempt: int, handoff: SlotGrant | None = None
    ) -> SlotGrant | None:
        return slots.acquire_slot(
            self._worker_id(), job_id, attempt, handoff=handoff, **self._limits()
        )

    def _try_acquire(self, job_id: int, attempt: int) -> SlotGrant | Refused:
        """One acquire transaction; it also gives back the slots released meanwhile (the
        latest is handed over: the acquire takes it in its own statement), and says why
        it was refused."""
        with self._heads_guard:
            deferred, self._deferred = self._deferred, []
        handoff = deferred[-1] if deferred else None

        freed = False

        def release_and_acquire(slots: SlotRepository) -> SlotGrant | Refused:
            nonlocal freed
            freed = False  # (a retried transaction starts over)
            if len(deferred) > 1:
                slots.release_slots(deferred[:-1])
            grant = self._acquire_slot(slots, job_id, attempt, handoff)
            if handoff is not None and (grant is None or grant.slot != handoff.slot):
                slots.release_slots([handoff])
                freed = True
            if grant is not None:
                return grant
            return Refused(over_share=slots.holds_its_share(job_id, **self._limits()))

        try:
            answer = self._tx(release_and_acquire)
        except BaseException:
            with self._heads_guard:
                self._deferred.extend(deferred)
            raise
        if freed:
            # The slot handed over is free now, and this job did not take it: the wake-up
            # it came with goes to another job's poller.
            with self._wake:
                self._wake_one(but=self._pollers.get(job_id))
        return answer

    def try_within(self, slots: SlotRepository, job_id: int, attempt: int) -> SlotGrant | None:
        """One try for a slot inside the caller's transaction (an item's start), so that
        an item whose slot is free costs no transaction of its own; None when none is
        free, and without asking when a thread of this process already waits for one
        (it is ahead in line: the caller then waits its turn through ``holding``).

        The caller's transaction holds the job's row; the statement does not wait for a
        slot, at most for another acquirer's commit of the same number.
        """
        # Read without _heads_guard: a waiter that registers a moment later only loses
        # its turn to this item once (fairness within the process, never the cap, which
        # the statement enforces).
        if self._heads:
            return None
        return self._acquire_slot(slots, job_id, attempt)

    def renewal(self, slots: SlotRepository, job_id: int, grant: SlotGrant) -> Rider | None:
        """The compare-and-set that keeps a slot for the job's next call, for the caller's
        transaction to carry (the finish of the call that held it and the start of the
        next: the reservation of that call carries it); None when it must not be kept.

        Not kept when a thread of this process waits for a slot (it gets this one), nor
        (the statement's refusal) when the job holds more than its fair share now, so a
        job that runs on does not keep another from its turn any longer than a release
        and an acquire would.
        """
        if self._heads:  # unguarded, as in try_within
            return None
        return slots.renewal(grant, job_id, **self._limits())

    def release(self, grant: SlotGrant, job_id: int | None = None) -> None:
        """Give the slot back (fenced by its token) and wake this process's waiters.

        While a thread of this process waits for a slot, the release rides in the
        acquire transaction that the wake-up starts (``_try_acquire``) instead of one of
        its own: under contention a call then costs one slot transaction, not two, and
        an acquire no longer queues behind releases for the database's row or, on SQLite,
        its one writer. The last waiter to leave gives back what no try took.
        """
        with self._heads_guard:
            deferred = bool(self._heads)
            if deferred:
                self._deferred.append(grant)
        if not deferred:
            self._release_now([grant])
        self.released(job_id)

    def _release_now(self, grants: list[SlotGrant]) -> None:
        try:
            self._tx(lambda slots: slots.release_slots(grants))
        except Exception:
            # The slots come back anyway after max_hold_seconds.
            log.exception("could not release provider slots %s", [g.slot for g in grants])

    def released(self, job_id: int | None = None) -> None:
        """A slot (of ``job_id``, if known) was given back, here or in a caller's
        committed transaction: wake this process's pollers that it may help."""
        with self._wake:
            if job_id in self._job_releases:
                self._job_releases[job_id] += 1
            for poller in self._pollers.values():
                if job_id is None or poller.job_id == job_id:
                    poller.at_share = False  # the job may be under its share now
            self._wake_one()

    def _wake_one(self, but: _Poller | None = None) -> None:
        """Wake one poller that may use a slot just freed (with _wake held): the next in
        turn of those not known to hold their job's share and not woken already. One,
        not all: the first to ask takes the slot, the others would be refused."""
        for poller in self._pollers.values():
            if poller is but or poller.at_share or poller.woken.is_set():
                continue
            poller.woken.set()
            # Round-robin between the jobs: the one woken goes to the end of the line.
            del self._pollers[poller.job_id]
            self._pollers[poller.job_id] = poller
            return

    def pause(self, seconds: float) -> None:
        """Pause new starts across the deployment for ``seconds`` (a 429's Retry-After)."""
        try:
            self._tx(lambda slots: slots.pause_starts(seconds))
        except Exception:
            log.exception("could not pause provider starts")
        with self._pause_lock:
            self._paused_until = max(self._paused_until, time.monotonic() + seconds)
        log.warning("provider asked to wait %.1f s: new calls paused deployment-wide", seconds)

    def _pause_left(self) -> float:
        """Seconds left of a deployment-wide pause (read at most every PAUSE_CACHE_SECONDS)."""
        now = time.monotonic()
        with self._pause_lock:
            fresh = now - self._pause_checked_at < PAUSE_CACHE_SECONDS
            if fresh:
                return max(0.0, self._paused_until - now)
            self._pause_checked_at = now
        seconds = self._tx(lambda slots: slots.paused_for())
        with self._pause_lock:
            self._paused_until = max(self._paused_until, now + seconds)
            return max(0.0, self._paused_until - now)

    def _wait_for_pace(self, stopping: Callable[[], bool], waiting: _Waiting) -> None:
        """Wait until this call may start: the deployment's pace (RPM) and any 429 pause."""
        rpm = self.settings.provider_rpm
        while True:
            if rpm > 0:
                answer = self._tx(lambda slots: slots.reserve_start(60.0 / rpm))
                wait = answer.wait_seconds
                if wait is not None:
                    if wait > 0:
                        waiting.set("pace" if wait > VISIBLE_WAIT_SECONDS else None)
                        _sleep(wait, stopping)
                    return
                left = max(0.05, min(answer.paused_for_seconds, 1.0))
            else:
                left = self._pause_left()
                if left <= 0:
                    return
            if stopping():
                raise CallNotStarted()
            waiting.set("pace")
            _sleep(min(left, 1.0), stopping)

    @contextmanager
    def holding(
        self,
        job_id: int,
        attempt: int,
        stopping: Callable[[], bool],
        count_waiting: WaitCounter,
        keep_fence: Callable[[], None],
        granted: SlotGrant | None = None,
    ) -> Iterator[Holder]:
        """A holder that takes a slot before each call of one item and always gives it back.

        ``keep_fence`` runs between tries while waiting: it raises Fenced once the run
        was declared dead, cancelled or superseded (a refused slot does not say why).
        ``granted`` is a slot the item's start already took (``try_within``).
        """
        holder = Holder(self, job_id, attempt, stopping, count_waiting, keep_fence, granted)
        try:
            yield holder
        finally:
            holder.release()

    def _acquire(self, holder: Holder, waiting: _Waiting) -> SlotGrant:
        """Take a slot, waiting as long as it takes (until the run stops or is fenced).

        Per job, one thread of this process at a time asks the database (the job's
        poller); the job's other threads wait for that role. So fifty threads waiting
        cost the database what one does, each try stays as quick as an uncontended one,
        and a job over its fair share does not keep another job's thread from asking.
        """
        with self._heads_guard:
            head, users = self._heads.get(holder.job_id, (threading.Lock(), 0))
            self._heads[holder.job_id] = (head, users + 1)
        with self._wake:
            self._job_releases.setdefault(holder.job_id, 0)
        try:
            while True:
                holder.keep_fence()
                if head.acquire(timeout=MAX_POLL_SECONDS):
                    try:
                        return self._poll(holder, waiting)
                    finally:
                        head.release()
                if holder.stopping():
                    raise CallNotStarted()
                waiting.set("slot")
        finally:
            with self._heads_guard:
                head, users = self._heads[holder.job_id]
                if users <= 1:
                    del self._heads[holder.job_id]
                    with self._wake:
                        self._job_releases.pop(holder.job_id, None)
                        self._at_share.pop(holder.job_id, None)
                else:
                    self._heads[holder.job_id] = (head, users - 1)
                left: list[SlotGrant] = []
                if not self._heads:
                    left, self._deferred = self._deferred, []
            if left:
                self._release_now(left)

    def _poll(self, holder: Holder, waiting: _Waiting) -> SlotGrant:
        """As the job's poller: ask until granted.

        A release in this process that may help wakes it at once: any release when no
        slot was free, only one of the job's own when the job holds its fair share (a
        slot another job frees would be refused to it again: fifty waiting threads would
        otherwise ask after every release, and be refused). A job's slots are all held
        by the process that runs it, so its own releases are seen here; a slot freed by
        another process, or a share grown because a job ended, is found at the next try,
        at most MAX_POLL_SECONDS later.
        """
        job_id = holder.job_id
        poller = _Poller(job_id)
        with self._wake:
            poller.at_share = self._at_share.get(job_id) == self._job_releases[job_id]
            self._pollers[job_id] = poller
        delay = 0.005
        try:
            if poller.at_share:
                # The job held its share at its last grant, and none of its slots came
                # back since: asking now would be refused.
                waiting.set("slot")
                poller.woken.wait(MAX_POLL_SECONDS)
            while True:
                holder.keep_fence()
                with self._wake:
                    releases = self._job_releases[job_id]
                    poller.woken.clear()
                # One acquire statement at a time per process, whichever job asks: the
                # jobs' pollers would otherwise queue for the database's cores (ten running
                # jobs, ten statements at once on two cores made each 6x slower). A try
                # takes about a millisecond, so taking turns costs a poller little.
                with self._asking:
                    answer = self._try_acquire(job_id, holder.attempt)
                self._note_try(poller, answer, releases)
                if isinstance(answer, SlotGrant):
                    return answer
                # A stop ends only a real wait: a started item whose slot is free is sent
                # (a graceful stop lets in-flight items finish).
                if holder.stopping():
                    raise CallNotStarted()
                waiting.set("slot")
                if poller.at_share:
                    poller.woken.wait(MAX_POLL_SECONDS)
                else:
                    poller.woken.wait(delay)
                    delay = min(delay * 2, MAX_POLL_SECONDS)
        finally:
            with self._wake:
                del self._pollers[job_id]
                if poller.woken.is_set():  # leaving (fenced, stopped) with a wake-up
                    self._wake_one()

    def _note_try(self, poller: _Poller, answer: SlotGrant | Refused, releases: int) -> None:
        """Remember whether the poller's job holds its share after a try (``releases``:
        the job's count of releases when the try began), and pass on a wake-up that came
        during the try for a slot this poller will not take."""
        granted = isinstance(answer, SlotGrant)
        at_share = answer.at_share if isinstance(answer, SlotGrant) else answer.over_share
        with self._wake:
            if at_share:
                self._at_share[poller.job_id] = releases
            else:
                self._at_share.pop(poller.job_id, None)
            # A release of the job's own during the try: it may be under its share now.
            poller.at_share = at_share and self._job_releases[poller.job_id] == releases
            if (granted or poller.at_share) and poller.woken.is_set():
                poller.woken.clear()
                self._wake_one(but=poller)


class _Poller:
    """The thread of this process that asks for a slot for one job. ``woken`` is set when
    a slot it may take was freed; ``at_share`` while its job holds its fair share as far
    as this process knows (only a release of the job's own slot changes that)."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        self.woken = threading.Event()
        self.at_share = False


@dataclass(frozen=True)
class Refused:
    """An acquire that found no slot for the job: ``over_share`` when the job holds its
    fair share already (only the release of one of its own slots can help it then)."""

    over_share: bool


# count_waiting(reason, delta): add delta to the run's count of items waiting for reason.
WaitCounter = Callable[[str, int], None]


class _Waiting:
    """Counts one item on its run's row while it waits longer than a moment, and why."""

    def __init__(self, count: WaitCounter) -> None:
        self._count = count
        self._since = time.monotonic()
        self._shown: str | None = None

    def set(self, reason: str | None) -> None:
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
        self.set(None)


class Holder:
    """One item's calls: a slot before each one, released when it returns."""

    def __init__(
        self,
        gate: ProviderGate,
        job_id: int,
        attempt: int,
        stopping: Callable[[], bool],
        count_waiting: WaitCounter,
        keep_fence: Callable[[], None],
        granted: SlotGrant | None = None,
    ) -> None:
        self._gate = gate
        self.job_id = job_id
        self.attempt = attempt
        self.stopping = stopping
        self.keep_fence = keep_fence
        self._count_waiting = count_waiting
        self._grant = granted
        # Whether the held slot's call may start: the pace and any 429 pause waited for.
        self._paced = False

    def acquire(self) -> None:
        """Wait for a slot and the pace; raise CallNotStarted when the run stops meanwhile."""
        if self._grant is not None and self._paced:
            return
        waiting = _Waiting(self._count_waiting)
        try:
            if self._grant is None:
                self._grant = self._gate._acquire(self, waiting)
            self._gate._wait_for_pace(self.stopping, waiting)
            self._paced = True
        except BaseException:
            self.release()
            raise
        finally:
            waiting.done()

    @property
    def grant(self) -> SlotGrant | None:
        """The slot held now, if any."""
        return self._grant

    def release(self) -> None:
        """Give the slot back, if one is held."""
        grant, self._grant, self._paced = self._grant, None, False
        if grant is not None:
            self._gate.release(grant, self.job_id)

    def forget(self, grant: SlotGrant) -> None:
        """Stop holding ``grant`` without releasing it: a transaction to come does that."""
        if self._grant == grant:
            self._grant, self._paced = None, False

    def released_within(self, grant: SlotGrant) -> None:
        """The caller's committed transaction gave ``grant`` back (the item's finish)."""
        if self._grant == grant:
            self._grant, self._paced = None, False
        self._gate.released(self.job_id)

    def provider(self, inner: TTSProvider) -> TTSProvider:
        """``inner`` whose failed calls give the slot back at once (429: pause all)."""
        return _SlotProvider(inner, self)


class _SlotProvider:
    """A provider whose calls release the holder's slot and share a 429's Retry-After."""

    def __init__(self, inner: TTSProvider, holder: Holder) -> None:
        self._inner = inner
        self._holder = holder
        self.name = inner.name
        self.voices = inner.voices
        self.max_chars = inner.max_chars
        self.content_type = inner.content_type
        self.file_extension = inner.file_extension

    def synthesize(self, text: str, voice: str) -> bytes:
        # A call that returns audio keeps its slot until the item's finish, whose
        # transaction gives it back (no transaction of its own); the holder's context
        # gives it back if the item ends any other way. A failed call gives it back now:
        # a retry waits (backoff) and takes a slot again.
        try:
            return self._inner.synthesize(text, voice)
        except BaseException as exc:
            if isinstance(exc, RetryableProviderError) and exc.status == 429 and exc.retry_after:
                # Capped at the call timeout, the longest wait an item accepts: a longer
                # one fails that item as rate-limited and must not stall every other job.
                gate = self._holder._gate
                gate.pause(min(exc.retry_after, gate.settings.tts_timeout_seconds))
            self._holder.release()
            raise


def _sleep(seconds: float, stopping: Callable[[], bool]) -> None:
    """Sleep, waking early (in steps of at most 0.1 s) when the run begins to stop."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if stopping():
            raise CallNotStarted()
        time.sleep(min(left, 0.1))
