"""2. call: one started item's provider call, with nothing held.

No transaction and no connection is open during the call; what the call holds is its
slot row's lease and its reservation row. The call goes through
``providers/retry.py``'s ``synthesize_with_retries``. Before each attempt: the pace, and
the fence's freshness (a stale fence is renewed, a lost one stops the run); the first
attempt was fenced and billed by the item's start, each further one is fenced, billed
and given a slot again in one transaction before it is sent (every attempt counted,
recorded before the call). The last check, once, is at the transport's send
(``providers.base.guarded``): a process frozen after the checks above sends nothing.
An attempt that was not sent gives its reservation and slot back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from speechbatch.adapters import metrics
from speechbatch.adapters.providers.base import (
    CallNotSent,
    ProviderError,
    RetryableProviderError,
    TTSProvider,
    guarded,
)
from speechbatch.adapters.providers.retry import synthesize_with_retries
from speechbatch.adapters.uow import RunUnit
from speechbatch.errors import BudgetExceeded, Fenced
from speechbatch.runner.gate import CallNotStarted, Waiting
from speechbatch.runner.item import Items, NoSlot, Run, Started, stop_over_budget

log = logging.getLogger(__name__)


class NotSent(Exception):
    """The item's next attempt will not be sent now (the run stops, the budget is out):
    the item goes back to PENDING for the next run."""


class Calls:
    """Sends started items to the provider."""

    def __init__(self, items: Items) -> None:
        self.items = items

    def send(self, run: Run, started: Started) -> tuple[bytes | None, str | None] | None:
        """(audio, None) or (None, why it failed); None when the item was not sent and
        went back to PENDING. Raises Fenced when the run may no longer write."""
        items = self.items
        waiting = Waiting(lambda reason, delta: items.count_waiting(run, reason, delta))

        def before_attempt(number: int) -> None:
            if number > 1:
                self._restart(run, started, waiting)
            try:
                items.gate.wait_for_pace(lambda: self._stopping(run), waiting)
            except CallNotStarted:
                raise NotSent() from None
            finally:
                waiting.done()
            items.keep_fence(run)

        def guard() -> None:
            try:
                items.keep_fence(run)
            except Fenced:
                raise CallNotSent() from None

        characters = len(started.text)
        try:
            with guarded(guard):
                audio = synthesize_with_retries(
                    _SlotProvider(items.provider, self, run, started),
                    started.text,
                    run.voice,
                    options=run.options,
                    max_attempts=items.settings.tts_max_attempts,
                    timeout_seconds=items.settings.tts_timeout_seconds,
                    before_attempt=before_attempt,
                    on_result=lambda status, seconds: metrics.record_provider_call(
                        status, seconds, characters
                    ),
                )
        except NotSent:
            self._back_to_pending(run, started)
            return None
        except (CallNotSent, Fenced):
            items.give_back(run, started)
            raise Fenced() from None
        except ProviderError as exc:
            log.warning(
                "provider failure job=%s attempt=%s item=%s status=%s: %s",
                run.job_id, run.attempt, started.item_id, exc.status, exc.message,
            )  # fmt: skip
            self.release_after_attempt(run, started, succeeded=False)  # if still held
            return None, exc.message
        except BaseException:
            items.give_back(run, started)
            raise
        if run.fenced.is_set():
            # Cancelled (or superseded) while the call was in flight: its answer is discarded.
            items.give_back(run, started)
            raise Fenced()
        return audio, None

    def _back_to_pending(self, run: Run, started: Started) -> None:
        """The item's attempt was not sent: give back what it holds; PENDING again."""
        self.items.give_back(run, started)
        run.left_items = True
        if not self.items.fenced_tx(
            run, lambda uow: uow.runs.return_item(run.job_id, run.attempt, started.item_id)
        ):
            raise Fenced()

    def _stopping(self, run: Run) -> bool:
        return run.fenced.is_set() or self.items.draining()

    def _restart(self, run: Run, started: Started, waiting: Waiting) -> None:
        """A further attempt: fence, bill it and take a slot in one transaction,
        waiting on the gate while no slot is free."""
        items = self.items

        def work(uow: RunUnit) -> object:
            if not uow.runs.stamp_job_progress(run.job_id, run.attempt):
                return None
            return items.reserve_and_take(uow, run, len(started.text))

        while True:
            mark = items.gate.mark(run.job_id)
            try:
                got = items.fenced_tx(run, work)
            except NoSlot as refused:
                if items.stop_waiting(run):
                    raise NotSent() from None
                waiting.set("slot")
                items.keep_fence(run)
                items.gate.wait(mark, run.job_id, refused.at_share)
                continue
            except BudgetExceeded:
                # A retry that no longer fits: the item waits, PENDING, for a raised budget.
                stop_over_budget(items.tx, run, started.item_id, len(started.text))
                raise NotSent() from None
            if not got:
                run.fenced.set()
                raise Fenced()
            assert isinstance(got, tuple)
            started.reservation, started.slot = got
            return

    def release_after_attempt(self, run: Run, started: Started, *, succeeded: bool) -> None:
        """A sent attempt ended: its reservation is kept (the provider got it), its slot
        goes back now, before the audio is stored (a failed one's retry waits its
        backoff, then takes one again; a succeeded one's thread goes on to its next
        item, so its own job's waiters are not woken for it)."""
        slot, started.slot = started.slot, None
        if slot is not None:
            self.items.gate.release(slot, run.job_id, lane_goes_on=succeeded)


class _SlotProvider:
    """The provider, as one item's calls see it: a sent attempt keeps its reservation
    and gives its slot back as soon as its answer came; a failed one shares a 429's
    Retry-After."""

    def __init__(self, inner: TTSProvider, calls: Calls, run: Run, started: Started) -> None:
        self._inner = inner
        self._calls = calls
        self._run = run
        self._started = started
        self.name = inner.name
        self.voices = inner.voices
        self.max_chars = inner.max_chars
        self.content_type = inner.content_type
        self.file_extension = inner.file_extension

    def synthesize(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> bytes:
        try:
            audio = self._inner.synthesize(text, voice, options)
        except CallNotSent:
            raise  # not sent: the caller gives its reservation back
        except BaseException as exc:
            self._started.reservation = None  # sent: the provider counts it
            if isinstance(exc, RetryableProviderError) and exc.status == 429 and exc.retry_after:
                # Capped at the call timeout, the longest wait an item accepts: a longer
                # one fails that item as rate-limited and must not stall every other job.
                gate = self._calls.items.gate
                gate.pause(min(exc.retry_after, gate.settings.tts_timeout_seconds))
            self._calls.release_after_attempt(self._run, self._started, succeeded=False)
            raise
        self._started.reservation = None
        self._calls.release_after_attempt(self._run, self._started, succeeded=True)
        return audio
