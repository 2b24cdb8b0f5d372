"""One item of a run, in three steps: start, call, finish.

1. ``start``: ONE short fenced transaction. The fence (the job row at the run's
   attempt), the item PENDING -> GENERATING, its fingerprint looked up: found, the item
   is DONE right here with the audio it shares (no call, no slot, no reservation);
   otherwise its characters are reserved (the budget's compare-and-set) and a provider
   slot taken. No free slot: the transaction rolls back, the item waits on the gate
   (keeping its fence fresh) and starts again.
2. ``call``: the provider call with nothing held (see ``call.py``); its slot goes back
   as soon as its answer came, before the audio is measured and stored.
3. ``finish``: ONE short fenced transaction: DONE (its audio key, its take) or ERROR.
   Then the audio it replaced is deleted when nothing refers to it any more.

A fenced write that wins nothing means the run was declared dead or superseded: it
raises Fenced and the run stops, writing nothing more. Nothing is carried from one item
to the next.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from speechbatch.adapters import metrics
from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.repositories.items import FinishedItem
from speechbatch.adapters.repositories.ledger import Reservation
from speechbatch.adapters.repositories.slots import SlotGrant
from speechbatch.adapters.uow import RunUnit
from speechbatch.config import Settings
from speechbatch.domain.lexicon import EMPTY, Lexicon
from speechbatch.errors import BudgetExceeded, DatabaseUnavailable, Fenced
from speechbatch.runner.gate import ProviderGate, Waiting
from speechbatch.runner.lexicon import checked
from speechbatch.runner.measure import Measured, measure_audio
from speechbatch.runner.transactions import Transactions
from speechbatch.services.ports import Storage

log = logging.getLogger(__name__)
T = TypeVar("T")

# A provider call is sent only within this fraction of WORKER_DEAD_SECONDS after the start
# of the run's last successful fenced write; an older fence is renewed first (one UPDATE).
# Recovery of a dead worker needs WORKER_DEAD_SECONDS without a heartbeat, and the
# heartbeat beats about every quarter of that and freezes with the process: a fence
# younger than a quarter leaves about half of WORKER_DEAD_SECONDS before anyone can take
# the item over. The clock is read BEFORE the fenced transaction starts, so a commit that
# happened before a freeze and returned after it never looks fresh.
FRESH_FENCE_FRACTION = 0.25


def audio_key(job_id: int, item_id: int, attempt: int, extension: str) -> str:
    """Where an item's audio of one attempt lives; a later run never reuses the name."""
    return f"jobs/{job_id}/{item_id}-a{attempt}.{extension}"


@dataclass
class Run:
    """One run of this process, shared by its item threads."""

    job_id: int
    attempt: int
    voice: str = ""
    organization_id: int = 0
    # The job's options (speed, instructions), sent with every call of the run.
    options: dict[str, Any] = field(default_factory=dict)
    # The organization's rules when the run began: every item of the run is sent,
    # billed and fingerprinted with them (see ``runner/lexicon.py`` for a change).
    lexicon: Lexicon = EMPTY
    regenerate: bool = False
    # Set (with the message) when the budget could not pay for the next call.
    over_budget: str | None = None
    # Items were left PENDING because the run began to stop (drain).
    left_items: bool = False
    # time.monotonic() taken just before the run's last fenced write that won (any thread).
    fenced_at: float = float("-inf")
    fenced: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


class NoSlot(Exception):
    """The start found no free slot for its job: its transaction rolls back.
    ``at_share``: the job holds its fair share (only its own releases help it)."""

    def __init__(self, at_share: bool) -> None:
        super().__init__("no provider slot free")
        self.at_share = at_share


@dataclass
class Started:
    """An item that its start made GENERATING, with what its first call holds; or,
    with ``reused_from``, an item made DONE by sharing that item's audio."""

    item_id: int
    text: str  # the spoken text: what is sent and billed
    fingerprint: str
    slot: SlotGrant | None = None
    reservation: Reservation | None = None
    # The audio the item had when it started (a regenerate replaces it).
    previous_audio_path: str | None = None
    reused_from: int | None = None
    orphaned_audio_paths: tuple[str, ...] = ()
    # The job has no item left to start: the other jobs' fair shares may have grown.
    drained: bool = False


class Items:
    """Starts, fences and finishes the items of this process's runs."""

    def __init__(
        self,
        tx: Transactions,
        gate: ProviderGate,
        provider: TTSProvider,
        storage: Storage,
        settings: Settings,
        draining: Callable[[], bool],
    ) -> None:
        self.tx = tx
        self.gate = gate
        self.provider = provider
        self.storage = storage
        self.settings = settings
        self.draining = draining

    # 1. start

    def start(self, run: Run, item_id: int, spoken: str, fingerprint: str) -> Started | None:
        """Start the item (see the module's docstring) to send ``spoken``, its spoken
        text as the run's grouping computed it (an item's text cannot change while its
        job is GENERATING: edits and restores are refused); None when it is not to be
        sent now (no longer startable, the budget refused it, the run began to stop)."""
        waiting = Waiting(lambda reason, delta: self.count_waiting(run, reason, delta))
        try:
            while True:
                mark = self.gate.mark(run.job_id)
                try:
                    started = self.fenced_tx(
                        run, lambda uow: self._start_tx(uow, run, item_id, spoken, fingerprint)
                    )
                except NoSlot as refused:
                    if self.stop_waiting(run):
                        return None
                    waiting.set("slot")
                    self.keep_fence(run)
                    self.gate.wait(mark, run.job_id, refused.at_share)
                    continue
                except BudgetExceeded:
                    stop_over_budget(self.tx, run, item_id, len(spoken))
                    return None
                if started is None:
                    self.fence(run)  # raises Fenced, or the item was not startable
                elif started.drained:
                    self.gate.share_changed()
                return started
        finally:
            waiting.done()

    def _start_tx(
        self, uow: RunUnit, run: Run, item_id: int, spoken: str, fingerprint: str
    ) -> Started | None:
        lookup = None if run.regenerate else fingerprint
        started = uow.runs.start_item(run.job_id, run.attempt, item_id, reuse_fingerprint=lookup)
        if started is None:
            return None
        source = started.reusable_item_id
        if source is not None:
            reused = checked(uow, run, item_id, spoken, uow.runs.reuse_audio(
                run.job_id, run.attempt, item_id, source, fingerprint,
                spoken_text=spoken, keep=self.settings.takes_kept,
            ))  # fmt: skip
            if reused:
                return Started(
                    item_id,
                    spoken,
                    fingerprint,
                    reused_from=source,
                    orphaned_audio_paths=reused.orphaned_audio_paths,
                    drained=started.drained,
                )
        reservation, slot = self.reserve_and_take(uow, run, len(spoken))
        return Started(
            item_id,
            spoken,
            fingerprint,
            slot,
            reservation,
            started.previous_audio_path,
            drained=started.drained,
        )

    def reserve_and_take(
        self, uow: RunUnit, run: Run, characters: int
    ) -> tuple[Reservation, SlotGrant]:
        """In a fenced transaction: take a slot for one attempt and bill it. Raises
        NoSlot or BudgetExceeded, which roll the transaction back.

        The slot first: a start that finds none (most of them while jobs wait for slots)
        rolls back before it locks the organization's month row, which every start of
        every job of the organization needs; the bill comes last, so that row is held
        only for the bill's own statements and the commit."""
        slot = self.gate.take(uow.slots, run.job_id, run.attempt)
        if slot is None:
            raise NoSlot(self.gate.holds_its_share(uow.slots, run.job_id))
        reservation = uow.spending.reserve_characters(
            run.organization_id, run.job_id, run.attempt, characters
        )
        if reservation is None:
            raise BudgetExceeded()
        return reservation, slot

    def stop_waiting(self, run: Run) -> bool:
        """Whether an item that waits should give up its wait (raises Fenced when fenced)."""
        if run.fenced.is_set():
            raise Fenced()
        if self.draining() or run.over_budget is not None:
            run.left_items = True
            return True
        return False

    # 3. finish

    def finish(self, run: Run, started: Started, audio: bytes | None, error: str | None) -> bool:
        """Store the audio and make the item DONE, or make it ERROR, in one fenced
        transaction; whether it ended DONE. Raises Fenced when lost."""
        key, measured = None, Measured()
        if audio is not None:
            measured = measure_audio(audio, started.text, run.options)
            key = audio_key(run.job_id, started.item_id, run.attempt, self.provider.file_extension)
            try:
                self.storage.write(key, audio)
            except OSError as exc:
                key, error = None, f"could not store audio: {exc.strerror}"

        def work(uow: RunUnit) -> FinishedItem:
            if key is not None and audio is not None:
                done = uow.runs.finish_item(
                    run.job_id,
                    run.attempt,
                    started.item_id,
                    audio_path=key,
                    audio_bytes=len(audio),
                    audio_sha256=hashlib.sha256(audio).hexdigest(),
                    fingerprint=started.fingerprint,
                    replaced_audio_path=started.previous_audio_path,
                    duration_seconds=measured.duration_seconds,
                    suspect=measured.suspect,
                    spoken_text=started.text,
                    keep=self.settings.takes_kept,
                )
                return checked(uow, run, started.item_id, started.text, done)
            return uow.runs.finish_item(
                run.job_id, run.attempt, started.item_id, error_message=error or "failed"
            )

        finished = self.fenced_tx(run, work)
        if not finished:
            if key is not None:
                self.delete_orphan(key)
            raise Fenced()
        self.delete_orphans(finished.orphaned_audio_paths)
        return key is not None

    def reuse_duplicate(
        self, run: Run, item_id: int, source: int, fingerprint: str, spoken: str
    ) -> None:
        """A duplicate of an item this run has just finished shares its audio (no call)."""
        keep = self.settings.takes_kept
        reuse = (run.job_id, run.attempt, item_id, source, fingerprint)
        finished = self.fenced_tx(run, lambda uow: checked(uow, run, item_id, spoken,
            uow.runs.reuse_audio(*reuse, spoken_text=spoken, keep=keep)))  # fmt: skip
        if not finished:
            self.fence(run)
            return
        self.delete_orphans(finished.orphaned_audio_paths)
        self.reused(run, item_id, source)

    def delete_orphans(self, keys: tuple[str, ...]) -> None:
        """Delete audio that an item's finish replaced (or a take that fell off) and
        nothing refers to any more."""
        for key in keys:
            self.delete_orphan(key)

    def delete_orphan(self, key: str) -> None:
        """Delete one file nothing refers to; a failure is logged (gc deletes it later)."""
        try:
            self.storage.delete(key)
        except OSError as exc:
            log.warning("could not delete unreferenced audio %s: %s", key, exc)

    def reused(self, run: Run, item_id: int, source_item_id: int) -> None:
        """Count and log an item that shares another item's audio."""
        metrics.REUSED_ITEMS.inc()
        log.info(
            "audio reused job=%s attempt=%s item=%s from item=%s",
            run.job_id, run.attempt, item_id, source_item_id,
        )  # fmt: skip

    # The fence

    def fenced_tx(self, run: Run, work: Callable[[RunUnit], T]) -> T:
        """One transaction whose ``work`` returns something falsy when fenced; when it
        wins, remember when it began: the fence held at some moment after that."""
        began = time.monotonic()
        result = self.tx(work)
        if result:
            run.fenced_at = max(run.fenced_at, began)
        return result

    def fence(self, run: Run) -> None:
        """Stamp progress; raise Fenced when this run may no longer write."""
        if run.fenced.is_set():
            raise Fenced()
        if not self.fenced_tx(
            run, lambda uow: uow.runs.stamp_job_progress(run.job_id, run.attempt)
        ):
            run.fenced.set()
            raise Fenced()

    def keep_fence(self, run: Run) -> None:
        """Fence again when the last fence is no longer fresh (FRESH_FENCE_FRACTION);
        raise Fenced when the run may no longer write. Before every call, and while an
        item waits (its stamp keeps a job that only waits from looking dead)."""
        if run.fenced.is_set():
            raise Fenced()
        fresh = self.settings.worker_dead_seconds * FRESH_FENCE_FRACTION
        while time.monotonic() - run.fenced_at > fresh:
            self.fence(run)

    def count_waiting(self, run: Run, reason: str, delta: int) -> None:
        """Add ``delta`` to the run's count of items waiting for ``reason``."""
        self.tx(lambda uow: uow.slots.count_waiting(run.job_id, run.attempt, reason, delta))

    def give_back(self, run: Run, started: Started) -> None:
        """The attempt will not be sent: refund its reservation and release its slot
        (both compare-and-sets, so a retried transaction gives nothing back twice)."""
        reservation, started.reservation = started.reservation, None
        slot, started.slot = started.slot, None
        if reservation is None and slot is None:
            return

        def work(uow: RunUnit) -> None:
            if reservation is not None:
                uow.spending.refund_reservation(reservation)
            if slot is not None:
                uow.slots.release_slot(slot, run.job_id)

        try:
            self.tx(work)
        except DatabaseUnavailable:
            # The ledger then counts one call too many: never more than the budget allows.
            log.warning("could not refund an unsent call job=%s", run.job_id, exc_info=True)
        if slot is not None:
            self.gate.released(run.job_id)


def stop_over_budget(tx: Transactions, run: Run, item_id: int, characters: int) -> None:
    """Stop starting items: the organization's budget cannot pay for this call."""
    try:
        usage = tx(lambda uow: uow.spending.usage(run.organization_id))
        spent = (
            f"{usage.billed_characters:,} of {usage.budget_characters or 0:,} characters "
            f"billed in {usage.month}, {usage.remaining_characters or 0:,} left"
        )
    except DatabaseUnavailable:
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
