"""The in-process runner: sends a claimed job's items to the provider, fenced by attempt.

Per item: a short fenced transaction marks it GENERATING and stamps the job; the
provider call runs with no transaction or connection held; the audio is written
atomically under a key that carries the attempt; a second fenced transaction moves the
item to DONE or ERROR. A DONE finish shares its thread's next fenced transaction (the next
item's start, most often): nothing runs between them but Python, so no transaction waits
on a call, and the common item costs one commit instead of two. A fenced write that wins
nothing means this run was declared dead or superseded: it stops at once and writes
nothing more. Right before each provider
call the run fences again if its last successful fence is no longer fresh (see
``FRESH_FENCE_FRACTION``), so a process that was frozen does not pay for a call.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar, cast

from sqlalchemy.exc import InterfaceError, OperationalError

from . import metrics
from .config import Settings
from .errors import BudgetExceeded, Fenced
from .fingerprints import fingerprinter
from .providers.base import CallNotSent, ProviderError, TTSProvider, guarded
from .providers.retry import synthesize_with_retries
from .repositories.riders import Rider
from .repositories.runs import DoneItem, FinishedItem, StartedItem
from .repositories.slots import SlotGrant, SlotRepository
from .repositories.spending import Bill
from .slots import CallNotStarted, Holder, ProviderGate
from .storage import LocalStorage
from .uow import SessionUowFactory, Writer
from .workers import WorkerIdentity

log = logging.getLogger(__name__)
T = TypeVar("T")
# How long a run waits for an unreachable database before giving up on a write.
DB_RETRY_SECONDS = 60.0
# A provider call is sent only within this fraction of WORKER_DEAD_SECONDS after the start
# of the run's last successful fenced write; an older fence is renewed first (one UPDATE).
# Why 1/4, and what it guarantees: recovery of a dead worker needs WORKER_DEAD_SECONDS
# without a heartbeat; the heartbeat thread beats about every quarter of that (see
# Runner.__init__) and freezes together with the process. So recovery comes at least about
# 3/4 of WORKER_DEAD_SECONDS after a freeze begins, and a fence younger than 1/4 leaves about
# half of WORKER_DEAD_SECONDS before anyone can take the item over: room for the request to
# leave. After a freeze long enough for a takeover, every thread finds its fence stale (the
# monotonic clock runs on while a process is stopped) and fences again, which fails once the
# run was recovered: no call is sent. The clock is read BEFORE the fenced transaction starts,
# so a commit that happened before a freeze and returned after it never looks fresh. It is a
# fraction, not zero, so that the usual call, sent milliseconds after start_item fenced,
# costs no extra statement.
# The check runs twice: before the attempt, where a stale fence costs one UPDATE, and again
# in the provider's transport (``guarded``; for HTTP, when requests hands the prepared
# request to its adapter, and once more in urllib3's connection, after it has taken the
# connection and put the request line and headers together, right before they are
# written), where it refuses the send. The window that remains, stated honestly: a freeze
# that lands after that last check and before the request's bytes reach the socket
# (http.client joining the header lines and calling sendall: microseconds) and lasts long
# enough for recovery and another run's takeover still sends one call per thread caught
# there. Only the provider could close that (by refusing a stale fencing token). The clock
# does not count time a whole machine spends suspended (CLOCK_MONOTONIC).
FRESH_FENCE_FRACTION = 0.25

_RUNNERS: weakref.WeakSet[Runner] = weakref.WeakSet()


def audio_key(job_id: int, item_id: int, attempt: int, extension: str) -> str:
    """Where an item's audio of one attempt lives; a later run never reuses the name."""
    return f"jobs/{job_id}/{item_id}-a{attempt}.{extension}"


@dataclass
class _Group:
    """Items of one run that ask the provider the same thing: sent once, then shared."""

    fingerprint: str
    items: list[tuple[int, str]]


@dataclass(frozen=True)
class _Carry:
    """An item's DONE finish, waiting to share its thread's next fenced transaction.

    ``done`` is what the finish records (the next item's start folds it into its own
    fenced move); ``slot`` the provider slot its call held, offered to the next item's
    start (which keeps it when the job is within its fair share) and released otherwise;
    ``after`` runs once the transaction committed (it raises Fenced when the finish
    lost, having deleted the audio it would have kept).
    """

    job_id: int
    attempt: int
    done: DoneItem
    slot: SlotGrant | None
    after: Callable[[FinishedItem], None]

    def finish(self, uow: Writer) -> FinishedItem:
        """The finish's fenced move on its own."""
        return uow.runs.finish_done(self.job_id, self.attempt, self.done)


class _FinishLost(Fenced):
    """A folded finish lost while its start won: the transaction must not commit, and
    the run stops as when fenced (the item was not this run's to finish)."""


# fold(uow, done): a start that makes ``done`` DONE in its own fenced move (see _carried).
Fold = Callable[[Writer, DoneItem], tuple[FinishedItem, T | None]]


@dataclass
class _Run:
    job_id: int
    attempt: int
    voice: str = ""
    organization_id: int = 0
    regenerate: bool = False
    # Set (with the message) when the budget could not pay for the next call.
    over_budget: str | None = None
    # A thread stopped (draining) with items of its group still to do, or an item went
    # back to PENDING unsent because the run began to stop while it waited for a slot.
    left_items: bool = False
    # time.monotonic() taken just before the run's last fenced write that won (any thread).
    fenced_at: float = float("-inf")
    fenced: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


class Runner:
    """Runs claimed jobs in background threads of this process."""

    def __init__(
        self,
        uow_factory: SessionUowFactory,
        provider: TTSProvider,
        storage: LocalStorage,
        settings: Settings,
    ) -> None:
        self._uow_factory = uow_factory
        self.provider = provider
        self.storage = storage
        self.settings = settings
        self.identity = WorkerIdentity(
            uow_factory, interval_seconds=max(0.2, min(10.0, settings.worker_dead_seconds / 4))
        )
        self._runs: dict[tuple[int, int], _Run] = {}
        self._lock = threading.Lock()
        self._draining = threading.Event()
        # Per item thread: the DONE finish that its next fenced transaction carries.
        self._carries = threading.local()
        self.gate = ProviderGate(self._slot_tx, settings, self.worker_id)
        # What the heartbeat thread runs once the background is started (set by the app).
        self.background_tick: Callable[[], object] | None = None
        _RUNNERS.add(self)

    def _slot_tx(self, work: Callable[[SlotRepository], T]) -> T:
        return self._tx(lambda uow: work(uow.slots))

    def _tx(self, work: Callable[[Writer], T]) -> T:
        """Run one short transaction, retrying while the database is unreachable.

        A paid-for result must survive a database restart, so a run waits for the
        database (up to DB_RETRY_SECONDS) rather than dropping the audio. Every write
        here is a compare-and-set, so a retry after a lost commit acknowledgement can
        at worst lose the race, never write twice.
        """
        delay = 0.25
        deadline = time.monotonic() + DB_RETRY_SECONDS
        while True:
            try:
                with self._uow_factory() as uow:
                    result = work(uow)
                    uow.commit()
                    return result
            except (OperationalError, InterfaceError) as exc:
                if time.monotonic() > deadline or self._draining.is_set():
                    raise
                log.warning("database unavailable, retrying in %.1f s: %s", delay, exc.orig)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def start_background(self, tick: Callable[[], object] | None = None) -> None:
        """Register this process now and run ``tick`` after each heartbeat (gunicorn's
        post_worker_init): a process that is up resumes interrupted jobs within
        WORKER_DEAD_SECONDS even before it runs anything itself."""
        if tick is not None:
            self.identity.add_tick(tick)
        self.worker_id()

    def worker_id(self) -> int:
        """This process's worker id (registered on first use)."""
        return self.identity.id()

    @property
    def draining(self) -> bool:
        """Whether this process is stopping and starts no new item."""
        return self._draining.is_set()

    def start(self, job_id: int, attempt: int) -> None:
        """Run a job that this process has just claimed at ``attempt``."""
        run = _Run(job_id, attempt)
        with self._lock:
            self._runs[(job_id, attempt)] = run
        threading.Thread(
            target=self._run, args=(run,), name=f"speechbatch-job-{job_id}-a{attempt}", daemon=True
        ).start()

    def live_runs(self) -> list[tuple[int, int]]:
        """(job, attempt) of the runs still going in this process."""
        with self._lock:
            return list(self._runs)

    def cancel(self, job_id: int, attempt: int) -> None:
        """A run of this process was cancelled: its threads start nothing more, at once.

        The database already fences it; this only spares the in-flight threads the
        round trip that would tell them (no call leaves after the cancel's answer).
        """
        with self._lock:
            run = self._runs.get((job_id, attempt))
        if run is not None:
            run.fenced.set()

    def _groups(self, run: _Run, items: list[tuple[int, str]]) -> list[_Group]:
        """The run's items grouped by fingerprint, in the order of each group's first item."""
        fingerprint = fingerprinter(self.provider)
        groups: dict[str, _Group] = {}
        for item_id, text in items:
            fp = fingerprint(run.organization_id, run.voice, text)
            groups.setdefault(fp, _Group(fp, [])).items.append((item_id, text))
        return list(groups.values())

    def _stopping(self, run: _Run) -> bool:
        return run.fenced.is_set() or self.draining or run.over_budget is not None

    def _run(self, run: _Run) -> None:
        try:
            # Registered before any item: an item's start takes its slot as this worker,
            # inside a transaction that must not open another one to register it.
            self.worker_id()
            plan = self._tx(lambda uow: uow.runs.run_plan(run.job_id, run.attempt))
            run.voice, run.organization_id = plan.voice, plan.organization_id
            run.regenerate = plan.regenerate
            groups = self._groups(run, plan.items)
            work: queue.SimpleQueue[_Group] = queue.SimpleQueue()
            for group in groups:
                work.put(group)
            threads = [
                threading.Thread(
                    target=self._drain_queue,
                    args=(run, work),
                    daemon=True,
                    name=f"speechbatch-job-{run.job_id}-a{run.attempt}-{n}",
                )
                for n in range(min(self.settings.item_concurrency, max(1, len(groups))))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if run.fenced.is_set():
                metrics.FENCED.inc()
                log.warning(
                    "run fenced: declared dead or superseded, stopped job=%s attempt=%s",
                    run.job_id, run.attempt,
                )  # fmt: skip
            elif self.draining and (run.left_items or not work.empty()):
                self._interrupt(run)
            else:
                status = self._tx(
                    lambda uow: uow.runs.finish_run(
                        run.job_id, run.attempt, over_budget=run.over_budget
                    )
                )
                if status is None:
                    metrics.FENCED.inc()
                else:
                    metrics.RUNS.labels(outcome=status).inc()
                log.info("run ended job=%s attempt=%s status=%s", run.job_id, run.attempt, status)
        except Exception as exc:
            log.exception("run crashed job=%s attempt=%s", run.job_id, run.attempt)
            self._end_after_crash(run, exc)
        finally:
            run.done.set()
            with self._lock:
                self._runs.pop((run.job_id, run.attempt), None)

    def _end_after_crash(self, run: _Run, exc: Exception) -> None:
        try:
            self._tx(
                lambda uow: uow.runs.finish_run(
                    run.job_id, run.attempt, run_error=f"run failed: {exc}"
                )
            )
        except Exception:
            # Recovery will find it through the lease or the heartbeat.
            log.exception("could not end crashed run job=%s", run.job_id)

    def _drain_queue(self, run: _Run, work: queue.SimpleQueue[_Group]) -> None:
        try:
            while not self._stopping(run):
                try:
                    group = work.get_nowait()
                except queue.Empty:
                    return
                try:
                    self._process_group(run, group)
                except Fenced:
                    run.fenced.set()
        finally:
            self._flush_carry(run)

    def _take_carry(self) -> _Carry | None:
        carry: _Carry | None = getattr(self._carries, "carry", None)
        self._carries.carry = None
        return carry

    def _finish_alone(self, carry: _Carry) -> None:
        """Commit a carried finish in a transaction of its own."""
        carry.after(self._tx(lambda uow: self._carried(uow, carry, None)[0]))

    def _carried(
        self,
        uow: Writer,
        carry: _Carry,
        work: Callable[[Writer], T] | None,
        fold: Fold[T] | None = None,
    ) -> tuple[FinishedItem, T | None]:
        """In ``uow``: the carried finish, then ``work`` when it won; or ``fold``, which
        does both in one fenced move (a start). Meanwhile the finished call's slot is
        on offer (``_taken_offer``); a slot not taken is released last, fenced by its
        token whether or not the finish won."""
        offer = [] if carry.slot is None else [carry.slot]
        self._carries.offer = offer
        try:
            if fold is not None:
                finished, result = fold(uow, carry.done)
                if not finished:
                    # Not this run's item to finish although the fence held: keep nothing
                    # of the start either (_fenced_tx then commits the finish alone).
                    raise _FinishLost()
            else:
                finished = carry.finish(uow)
                result = work(uow) if finished and work is not None else None
        finally:
            self._carries.offer = []
        if offer:
            uow.slots.release_slot(offer[0])
        return finished, result

    def _offered(self) -> SlotGrant | None:
        """The slot on offer to this start (see ``_taken_offer``), left on offer."""
        offer: list[SlotGrant] = getattr(self._carries, "offer", [])
        return offer[0] if offer else None

    def _taken_offer(self) -> SlotGrant | None:
        """The slot of the item this thread has just finished, now this start's to keep
        (``_kept_or_taken``) or release: nothing releases it at the transaction's end."""
        offer: list[SlotGrant] = getattr(self._carries, "offer", [])
        return offer.pop() if offer else None

    def _kept_or_taken(
        self, uow: Writer, run: _Run, characters: int, offer: SlotGrant | None
    ) -> SlotGrant | None:
        """Reserve the call's characters and give it a slot, in the start's transaction.

        The slot of the call this thread has just finished is kept when the job is still
        within its fair share: its renewal rides with the reservation (one statement on
        PostgreSQL); otherwise it is released, so that an acquire can count it free, and
        a free slot is tried. The slot statements come after the job's row, the lock
        order of the finish (job, item, slot); the reservation last when it goes alone,
        since the month's row is the organization's, shared by all its runs.
        """
        renewal = None if offer is None else self.gate.renewal(uow.slots, run.job_id, offer)
        if renewal is None:
            return self._billed(run, uow, offer, characters)
        carried = self._bill(run, uow, characters, carrying=renewal)
        return self._kept_after_bill(run, uow, offer, carried)

    def _billed(
        self, run: _Run, uow: Writer, offer: SlotGrant | None, characters: int
    ) -> SlotGrant | None:
        """No renewal: give the offered slot back and try for a free one, then bill."""
        if offer is not None:
            uow.slots.release_slot(offer)
        slot = self.gate.try_within(uow.slots, run.job_id, run.attempt)
        self._bill(run, uow, characters)
        return slot

    def _kept_after_bill(
        self, run: _Run, uow: Writer, offer: SlotGrant | None, carried: bool
    ) -> SlotGrant | None:
        """The call was billed carrying the offered slot's renewal: the slot it keeps,
        or (the renewal lost) the offer given back and a free slot tried."""
        if carried:
            return offer
        if offer is not None:
            uow.slots.release_slot(offer)
        return self.gate.try_within(uow.slots, run.job_id, run.attempt)

    def _flush_carry(self, run: _Run) -> None:
        """The thread is leaving: commit the finish it still carries."""
        carry = self._take_carry()
        if carry is None:
            return
        try:
            self._finish_alone(carry)
        except Fenced:
            run.fenced.set()
        except Exception:
            # The database stayed away longer than DB_RETRY_SECONDS: the item is left
            # GENERATING and recovery finds it, as for a process that died here.
            log.exception("could not finish an item job=%s", run.job_id)

    def _process_group(self, run: _Run, group: _Group) -> None:
        """Send the group's first item; its duplicates then share that audio.

        When the first fails, the next one is sent (each is a call of its own); a
        duplicate never waits on another thread, since one thread owns the group.
        """
        source: int | None = None
        for item_id, text in group.items:
            if self._stopping(run):
                run.left_items = True
                return
            if source is None:
                if self._process_item(run, item_id, text, group.fingerprint):
                    source = item_id
                continue
            self._reuse_duplicate(run, item_id, source, group.fingerprint)

    def _reuse_duplicate(self, run: _Run, item_id: int, source: int, fingerprint: str) -> None:
        """A duplicate of an item this run has just finished shares its audio (no call)."""
        if self._fenced_tx(
            run,
            lambda uow: uow.runs.reuse_audio(run.job_id, run.attempt, item_id, source, fingerprint),
        ):
            self._reused(run, item_id, source)
        else:
            self._fence(run)

    def _reused(self, run: _Run, item_id: int, source_item_id: int) -> None:
        metrics.REUSED_ITEMS.inc()
        log.info(
            "audio reused job=%s attempt=%s item=%s from item=%s",
            run.job_id, run.attempt, item_id, source_item_id,
        )  # fmt: skip

    def _bill(self, run: _Run, uow: Writer, characters: int, carrying: Rider | None = None) -> bool:
        """Reserve and record one call's characters before it is sent (same transaction),
        with ``carrying`` in the same statement where the database allows; whether that
        rider won.

        Raises BudgetExceeded, which rolls the transaction back, when it does not fit.
        """
        bill = uow.spending.bill_call(
            run.organization_id, run.job_id, run.attempt, characters, carrying=carrying
        )
        if not bill:
            raise BudgetExceeded()
        return bill.carried

    def _over_budget(self, run: _Run, item_id: int, characters: int) -> None:
        """Stop starting items: the organization's budget cannot pay for this call."""
        try:
            with self._uow_factory(read_only=True) as uow:
                usage = uow.spending.usage(run.organization_id)
            spent = (
                f"{usage.billed_characters:,} of {usage.budget_characters or 0:,} characters "
                f"billed in {usage.month}, {usage.remaining_characters or 0:,} left"
            )
        except (OperationalError, InterfaceError):
            spent = "the usage could not be read"
        run.over_budget = (
            f"over budget: {spent}; the next item needs {characters:,}. "
            "Unsent items stay pending: raise the budget and Retry."
        )
        metrics.BUDGET_REFUSALS.labels(where="run").inc()
        log.warning(
            "budget refused a call job=%s attempt=%s item=%s characters=%s: %s",
            run.job_id, run.attempt, item_id, characters, run.over_budget,
        )  # fmt: skip

    def _fenced_tx(self, run: _Run, work: Callable[[Writer], T], fold: Fold[T] | None = None) -> T:
        """One fenced transaction (``work`` returns something falsy when fenced); when it
        wins, remember when it started: the fence held at some moment after that.

        The DONE finish that this thread carries (see ``_finish_later``) runs first in
        the same transaction, and ``work`` only when that finish won; with ``fold`` (an
        item's start), ``fold`` runs instead of both. When the transaction raises (a
        reservation the budget refuses rolls everything back), the finish is committed
        alone before the exception goes on: a paid-for result is never dropped.
        """
        began = time.monotonic()
        carry = self._take_carry()
        if carry is None:
            result = self._tx(work)
        else:
            try:
                finished, shared = self._tx(lambda uow: self._carried(uow, carry, work, fold))
            except BaseException:
                self._finish_alone(carry)
                raise
            carry.after(finished)  # raises Fenced when the finish lost (work never ran)
            # The finish won, so ``work`` ran: ``shared`` is its result (None included).
            result = cast(T, shared)
        if result:
            run.fenced_at = max(run.fenced_at, began)
        return result

    def _fence(self, run: _Run) -> None:
        """Stamp progress; raise Fenced when this run may no longer write."""
        if run.fenced.is_set():
            raise Fenced()
        if not self._fenced_tx(
            run, lambda uow: uow.runs.stamp_job_progress(run.job_id, run.attempt)
        ):
            raise Fenced()

    def _fence_and_bill(self, run: _Run, characters: int) -> None:
        """A retry: fence and bill its characters in one transaction before it is sent."""

        def work(uow: Writer) -> bool:
            if not uow.runs.stamp_job_progress(run.job_id, run.attempt):
                return False
            self._bill(run, uow, characters)
            return True

        if run.fenced.is_set() or not self._fenced_tx(run, work):
            raise Fenced()

    def _fence_before_call(self, run: _Run, attempt_number: int, characters: int) -> None:
        """Raise Fenced unless this run passed its fence recently (FRESH_FENCE_FRACTION).

        A retry always fences (a backoff is long and the run may have been superseded
        meanwhile); the first call fences only when start_item's fence is stale, e.g.
        after the process was frozen. The loop re-checks after a slow fence: freshness
        is counted from when the fenced write started, not from when it returned.
        """
        if attempt_number > 1:
            self._fence_and_bill(run, characters)
        self._fresh_or_refunded(run, characters)

    def _fresh_or_refunded(self, run: _Run, characters: int) -> None:
        """Fence again while the last fence is stale; when fenced, give the call's
        reserved characters back (it will not be sent) and raise Fenced.

        This attempt's characters are billed from its start on: a call that is not sent
        after all gives them back, so the ledger stays what the provider received.
        """
        try:
            if run.fenced.is_set():
                raise Fenced()
            while time.monotonic() - run.fenced_at > self._fresh_seconds:
                self._fence(run)
        except Fenced:
            self._refund(run, characters)
            raise

    def _send_guard(self, run: _Run, characters: int) -> Callable[[], None]:
        """The same check once more as the request's last step before it leaves (the
        provider's transport runs it): a process frozen between ``_fence_before_call``
        and the send finds its fence stale there and sends nothing."""

        def guard() -> None:
            try:
                self._fresh_or_refunded(run, characters)
            except Fenced:
                raise CallNotSent() from None

        return guard

    def _before_call(self, run: _Run, holder: Holder, attempt_number: int, characters: int) -> None:
        """Take a deployment-wide slot (and the pace), then pass the fence, before a call."""
        try:
            holder.acquire()
        except (CallNotStarted, Fenced):
            if attempt_number == 1:
                # start_item billed the first call; it will not be sent.
                self._refund(run, characters)
            raise
        self._fence_before_call(run, attempt_number, characters)

    def _keep_fence(self, run: _Run) -> None:
        """While an item waits: fence again when the last fence is no longer fresh.

        A refused slot does not tell a busy deployment from a dead run; this does, and
        its stamp keeps a job that only waits from looking dead.
        """
        if run.fenced.is_set():
            raise Fenced()
        if time.monotonic() - run.fenced_at > self._fresh_seconds:
            self._fence(run)

    @property
    def _fresh_seconds(self) -> float:
        return self.settings.worker_dead_seconds * FRESH_FENCE_FRACTION

    def _count_waiting(self, run: _Run, reason: str, delta: int) -> None:
        self._slot_tx(lambda slots: slots.count_waiting(run.job_id, run.attempt, reason, delta))

    def _refund(self, run: _Run, characters: int) -> None:
        """Give back a reservation whose call was never sent (the run was fenced first)."""
        try:
            self._tx(
                lambda uow: uow.spending.refund_characters(
                    run.organization_id, run.job_id, run.attempt, characters
                )
            )
        except (OperationalError, InterfaceError):
            # The ledger then counts one call too many: never more than the budget allows.
            log.warning("could not refund an unsent call job=%s", run.job_id, exc_info=True)

    def _process_item(self, run: _Run, item_id: int, text: str, fingerprint: str) -> bool:
        """Reuse or send one item; whether it ended DONE with audio (a sent item's DONE
        commits in the thread's next fenced transaction, see ``_finish_later``).

        One fenced transaction starts it (with the previous item's finish, if any),
        looks its fingerprint up (never for a regenerate) and either shares the audio
        found or reserves and records the call's characters and keeps or takes a
        provider slot; the call runs with no transaction open; the next fenced
        transaction of this thread finishes it and keeps the slot for the next call or
        gives it back.
        """
        characters = len(text)
        lookup = None if run.regenerate else fingerprint

        def begin(
            uow: Writer, started: StartedItem | None, billed: Bill | None = None
        ) -> tuple[StartedItem, SlotGrant | None] | None:
            # Answers with reusable_item_id set only when the audio was shared, and with
            # the slot this transaction took for the call (None: it waits for one).
            # ``billed``: the start billed the call already, carrying the offer's renewal.
            if started is None:
                return None
            if billed is not None:
                if not billed:
                    raise BudgetExceeded()
                slot = self._kept_after_bill(run, uow, self._taken_offer(), billed.carried)
                return started, slot
            source = started.reusable_item_id
            if source is not None and uow.runs.reuse_audio(
                run.job_id, run.attempt, item_id, source, fingerprint
            ):
                return started, None
            slot = self._kept_or_taken(uow, run, characters, self._taken_offer())
            return replace(started, reusable_item_id=None), slot

        def start(uow: Writer) -> tuple[StartedItem, SlotGrant | None] | None:
            return begin(
                uow,
                uow.runs.start_item(run.job_id, run.attempt, item_id, reuse_fingerprint=lookup),
            )

        def finish_and_start(
            uow: Writer, done: DoneItem
        ) -> tuple[FinishedItem, tuple[StartedItem, SlotGrant | None] | None]:
            # The thread's previous item becomes DONE in the start's own fenced move, and
            # when its slot is to be kept, the next call's bill (carrying the renewal)
            # travels with that move too: on PostgreSQL, one statement for all.
            offer = self._offered()
            renewal = None if offer is None else self.gate.renewal(uow.slots, run.job_id, offer)
            bill = None
            if renewal is not None:
                bill = uow.spending.call_bill(
                    run.organization_id, run.job_id, run.attempt, characters, carrying=renewal
                )
            finished, started, billed = uow.runs.finish_and_start_item(
                run.job_id, run.attempt, done, item_id, reuse_fingerprint=lookup, bill=bill
            )
            return finished, begin(uow, started, billed) if finished else None

        try:
            answer = self._fenced_tx(run, start, finish_and_start)
        except BudgetExceeded:
            self._over_budget(run, item_id, characters)
            return False
        if answer is None:
            # Either fenced or the item is no longer PENDING; the fence tells which.
            self._fence(run)
            return False
        started, slot = answer
        if started.reusable_item_id is not None:
            self._reused(run, item_id, started.reusable_item_id)
            return True
        try:
            with self.gate.holding(
                run.job_id,
                run.attempt,
                # Its characters are reserved already: only a stop or a fence (not the
                # budget running out for later items) keeps it from being sent.
                lambda: run.fenced.is_set() or self.draining,
                lambda reason, delta: self._count_waiting(run, reason, delta),
                lambda: self._keep_fence(run),
                granted=slot,
            ) as holder:
                return self._send(run, holder, item_id, text, fingerprint, started)
        except CallNotStarted:
            # The run began to stop (drain, cancel) while this item waited for a slot or
            # the pace: it goes back to PENDING unsent, for the next run.
            run.left_items = True
            if not self._tx(lambda uow: uow.runs.return_item(run.job_id, run.attempt, item_id)):
                raise Fenced() from None
            return False
        except BudgetExceeded:
            # A retry that no longer fits: the item waits, PENDING, for a raised budget.
            self._over_budget(run, item_id, characters)
            if not self._tx(lambda uow: uow.runs.return_item(run.job_id, run.attempt, item_id)):
                raise Fenced() from None
            return False

    def _send(
        self,
        run: _Run,
        holder: Holder,
        item_id: int,
        text: str,
        fingerprint: str,
        started: StartedItem,
    ) -> bool:
        """Call the provider for a started item, store its audio and finish it (giving
        its slot back in the finish's transaction); whether it ended DONE."""
        characters = len(text)
        try:
            with guarded(self._send_guard(run, characters)):
                audio = synthesize_with_retries(
                    holder.provider(self.provider),
                    text,
                    run.voice,
                    max_attempts=self.settings.tts_max_attempts,
                    timeout_seconds=self.settings.tts_timeout_seconds,
                    before_attempt=lambda n: self._before_call(run, holder, n, characters),
                    on_result=lambda status, seconds: metrics.record_provider_call(
                        status, seconds, characters
                    ),
                )
        except CallNotSent:
            # Refused at the last moment (the guard gave the characters back): fenced.
            raise Fenced() from None
        except ProviderError as exc:
            log.warning(
                "provider failure job=%s attempt=%s item=%s status=%s: %s",
                run.job_id, run.attempt, item_id, exc.status, exc.message,
            )  # fmt: skip
            self._fail_item(run, item_id, holder, exc.message)
            return False
        if run.fenced.is_set():
            # Cancelled (or superseded) while the call was in flight: its answer is discarded.
            raise Fenced()
        key = audio_key(run.job_id, item_id, run.attempt, self.provider.file_extension)
        try:
            self.storage.write(key, audio)
        except OSError as exc:
            self._fail_item(run, item_id, holder, f"could not store audio: {exc.strerror}")
            return False
        replaced = started.previous_audio_path
        replaced = replaced if replaced != key else None
        self._finish_later(run, item_id, holder, key, audio, fingerprint, replaced)
        return True

    def _finish_later(
        self,
        run: _Run,
        item_id: int,
        holder: Holder,
        key: str,
        audio: bytes,
        fingerprint: str,
        replaced: str | None,
    ) -> None:
        """Make a stored item DONE in this thread's next fenced transaction (see
        ``_fenced_tx``), which keeps its slot for the next call or gives it back; the
        thread's exit commits it at the latest. Nothing waits in between."""
        slot = holder.grant  # the carry's now: _carried keeps it or releases it
        sha256 = hashlib.sha256(audio).hexdigest()
        done = DoneItem(item_id, key, len(audio), sha256, fingerprint, replaced)
        if slot is not None:
            holder.forget(slot)  # the carry's transaction keeps or releases it, not the holder

        def after(finished: FinishedItem) -> None:
            if slot is not None:
                self.gate.released(run.job_id)
            if not finished:
                self.storage.delete(key)
                raise Fenced()
            # Shared audio is deleted only when no other item refers to it any more.
            if replaced and not finished.replaced_still_referenced:
                self.storage.delete(replaced)

        self._carries.carry = _Carry(run.job_id, run.attempt, done, slot, after)

    def _fail_item(self, run: _Run, item_id: int, holder: Holder, message: str) -> None:
        """Fenced, now: move the item to ERROR and, in the same transaction, give back
        the slot its call still holds."""
        slot = holder.grant

        def fail(uow: Writer) -> FinishedItem:
            finished = uow.runs.finish_item(run.job_id, run.attempt, item_id, error_message=message)
            if slot is not None:
                # Fenced by the grant's token, whether or not the finish won; after the
                # job's row, the start's lock order.
                uow.slots.release_slot(slot)
            return finished

        finished = self._fenced_tx(run, fail)
        if slot is not None:
            holder.released_within(slot)
        if not finished:
            raise Fenced()

    def _interrupt(self, run: _Run) -> None:
        message = (
            "interrupted: the server stopped; Retry resumes without paying again for DONE items"
        )
        won = self._tx(lambda uow: uow.runs.interrupt_run(run.job_id, run.attempt, message))
        if won:
            metrics.RUNS.labels(outcome="INTERRUPTED").inc()
        log.info("run interrupted job=%s attempt=%s won=%s", run.job_id, run.attempt, won)

    def stop_starting_items(self) -> None:
        """Start no new item from now on (safe to call from a signal handler)."""
        self._draining.set()

    def drain(self, timeout: float) -> None:
        """Graceful stop: start no new item, let in-flight calls finish, end runs INTERRUPTED."""
        self._draining.set()
        deadline = time.monotonic() + timeout
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.done.wait(max(0.0, deadline - time.monotonic()))
        for run in runs:
            if not run.done.is_set():
                # Calls still in flight past the grace period: end the run now; when they
                # return, their writes are fenced.
                try:
                    self._interrupt(run)
                except Exception:
                    log.exception("could not interrupt job=%s", run.job_id)
        self.identity.stop()


def stop_starting_items() -> None:
    """Tell every runner of this process to start no new item (SIGTERM arrived)."""
    for runner in list(_RUNNERS):
        runner.stop_starting_items()


def start_background_all() -> None:
    """Start every runner's background tick in this process (gunicorn's post_worker_init)."""
    for runner in list(_RUNNERS):
        runner.start_background(runner.background_tick)


def drain_all(timeout: float) -> None:
    """Drain every runner of this process (gunicorn's worker_exit hook, atexit)."""
    for runner in list(_RUNNERS):
        runner.drain(timeout)
