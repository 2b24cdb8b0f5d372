"""What the steps of an item share: this process's transactions, gate, provider, storage
and settings, and the run's fence.

The fence: every write of a run is conditional on its job being GENERATING at the run's
attempt; a write that wins nothing means the run was declared dead or superseded, and it
stops. A provider call is sent only within ``FRESH_FENCE_FRACTION`` of
WORKER_DEAD_SECONDS after the start of the run's last fenced write that won; an older
fence is renewed first (one UPDATE).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.providers.registry import resolve
from speechbatch.adapters.uow import RunUnit
from speechbatch.config import Settings
from speechbatch.runner.attempt import Attempt, Outcome, Run
from speechbatch.runner.gate import ProviderGate, Waiting
from speechbatch.runner.transactions import Rollback, Transactions
from speechbatch.services.ports import Storage

T = TypeVar("T")

# Recovery of a dead process needs WORKER_DEAD_SECONDS without a beat, and the heartbeat
# beats about every quarter of that and freezes with the process: a fence (or a slot)
# confirmed less than a quarter ago leaves about half of WORKER_DEAD_SECONDS before
# anyone can take the item (or the slot) over. The clock is read BEFORE the confirming
# transaction starts, so a commit that happened before a freeze and returned after it
# never looks fresh.
FRESH_FENCE_FRACTION = 0.25


@dataclass
class Steps:
    """The dependencies of the steps, and the run's fence."""

    tx: Transactions
    gate: ProviderGate
    provider: TTSProvider
    storage: Storage
    settings: Settings
    draining: Callable[[], bool]
    # The gates of the providers other than the default (one each: its own slots and pace).
    gates: dict[str, ProviderGate] = field(default_factory=dict)

    def provider_of(self, run: Run) -> TTSProvider:
        """The provider that speaks the run's voice (the narrator's)."""
        return run.provider or self.provider

    def speaker(self, run: Run, voice: str) -> tuple[TTSProvider, str]:
        """The provider that speaks ``voice`` (a line's, ``PROVIDER:VOICE``; empty: the
        run's) and the voice's name there."""
        if not voice:
            return self.provider_of(run), run.voice
        return resolve(self.provider, voice)

    def provider_for(self, attempt: Attempt) -> TTSProvider:
        """The provider of the attempt's own line (its voice's): it is sent, billed and
        stored by this one, whatever the job's voice is."""
        return attempt.provider or self.provider_of(attempt.run)

    def gate_of(self, attempt: Attempt) -> ProviderGate:
        """The gate of the attempt's own provider (its line's voice's): its slots and
        pace, apart from the other providers' even within one job."""
        return self.gates.get(self.provider_for(attempt).name, self.gate)

    def all_gates(self) -> list[ProviderGate]:
        """Every provider's gate, the default's first."""
        return [self.gate, *self.gates.values()]

    def shares_changed(self) -> None:
        """Fair shares may have grown (a job drained, a run ended): a job's lines may
        wait on any provider's gate, so every gate's waiters try again."""
        for gate in self.all_gates():
            gate.share_changed()

    def lane_ended(self, job_id: int) -> None:
        """A thread of the job stopped taking items: its job's waiters, on whichever
        provider's gate, may use its share."""
        for gate in self.all_gates():
            gate.lane_ended(job_id)

    @property
    def fresh_seconds(self) -> float:
        """How long a confirmed fence (or slot) is trusted before a call is sent on it."""
        return self.settings.worker_dead_seconds * FRESH_FENCE_FRACTION

    def fenced_tx(
        self, run: Run, work: Callable[[RunUnit], T | Rollback[T]], won: Callable[[T], bool]
    ) -> T:
        """One transaction of the run; when ``won`` says its fence held, remember when
        it began (the fence held at some moment after that)."""
        began = time.monotonic()
        result = self.tx(work)
        if won(result):
            run.fenced_at = max(run.fenced_at, began)
        return result

    def fence(self, run: Run) -> bool:
        """Stamp progress; False (and the run is fenced) when it may no longer write."""
        if run.fenced.is_set():
            return False
        stamp = self.fenced_tx(
            run, lambda uow: uow.runs.stamp_job_progress(run.job_id, run.attempt), bool
        )
        if not stamp:
            run.fenced.set()
        return stamp

    def keep_fence(self, run: Run) -> bool:
        """Fence again when the last fence is no longer fresh; False when the run may no
        longer write. While an item waits, its stamp keeps a job that only waits from
        looking dead."""
        while time.monotonic() - run.fenced_at > self.fresh_seconds:
            if not self.fence(run):
                return False
        return not run.fenced.is_set()

    def stop_reason(self, run: Run, *, started: bool = False) -> Outcome | None:
        """Why an item should not go on towards its call now, or None. A ``started``
        item (a begun attempt, a retry's wait) goes on when another item found the
        budget short: its own reservation decides."""
        if run.fenced.is_set():
            return Outcome.FENCED
        if self.draining() or run.failure is not None:
            return Outcome.NOT_SENT
        if not started and run.over_budget is not None:
            return Outcome.NOT_SENT
        return None

    def waiting(self, run: Run) -> Waiting:
        """A counter of one item's visible wait (for a slot, for the pace) on its run."""
        return Waiting(
            lambda reason, delta: self.tx(
                lambda uow: uow.slots.count_waiting(run.job_id, run.attempt, reason, delta)
            )
        )
