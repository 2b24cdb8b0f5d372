"""send: one provider call of a begun attempt, with no transaction or connection held.

This is where a request goes to the provider. Right before it leaves, the fence and the
slot are confirmed (``confirm``): when either was confirmed longer ago than a quarter of
WORKER_DEAD_SECONDS (a wait for the pace, a slow database, a frozen process), one
transaction stamps the fence and renews the slot. A run that lost its fence sends
nothing (FENCED); a slot that was given to someone else meanwhile is not sent on
(NO_SLOT: the attempt begins again). For the HTTP provider the check runs once more in
its transport, the last step before the request is written (``providers.base.guarded``).

The answer becomes the attempt's outcome: SENT with the audio, RETRY after a wait
(``providers/retry.py``: backoff, Retry-After, the cap), or FAILED. A 429's Retry-After
also pauses new calls across the deployment, before the slot goes back.
"""

from __future__ import annotations

import logging
import time

from speechbatch.adapters import metrics
from speechbatch.adapters.providers.base import (
    CallNotSent,
    Delivery,
    PermanentProviderError,
    ProviderError,
    RefusedKeyError,
    RetryableProviderError,
    guarded,
)
from speechbatch.adapters.providers.retry import after_failure, call_label
from speechbatch.adapters.uow import RunUnit
from speechbatch.runner.attempt import Attempt, Outcome
from speechbatch.runner.hold import Hold
from speechbatch.runner.steps import Steps

log = logging.getLogger(__name__)


def send(steps: Steps, attempt: Attempt, hold: Hold) -> Attempt:
    """Call the provider once for a BEGUN attempt (see the module); ``hold`` learns how
    far the request got."""
    if attempt.outcome is not Outcome.BEGUN:
        return attempt
    run = attempt.run
    confirmed = attempt.confirmed_at
    refused: list[Outcome] = []

    def guard() -> None:
        nonlocal confirmed
        outcome, confirmed = confirm(steps, attempt, confirmed)
        if outcome is not None:
            refused.append(outcome)
            raise CallNotSent()

    started = time.monotonic()
    try:
        guard()
        started = time.monotonic()
        hold.delivery = Delivery.IN_DOUBT  # from here on the request may leave
        with guarded(guard):
            speech = steps.provider_for(attempt).speak(
                attempt.text, attempt.provider_voice or run.voice, run.options
            )
    except CallNotSent:
        hold.delivery = Delivery.NOT_SENT
        if refused and refused[0] is Outcome.NO_SLOT:
            return attempt.to(Outcome.NO_SLOT, number=attempt.number - 1)  # not a call
        return attempt.to(Outcome.FENCED)
    except ProviderError as exc:
        hold.delivery = exc.delivery
        _count(steps, attempt, exc, time.monotonic() - started)
        return _failed(steps, attempt, exc)
    hold.delivery, hold.succeeded = Delivery.RECEIVED, True
    _count(steps, attempt, None, time.monotonic() - started)
    if run.fenced.is_set():
        # Cancelled (or superseded) while the call was in flight: its answer is discarded.
        return attempt.to(Outcome.FENCED)
    return attempt.to(Outcome.SENT, audio=speech.audio, speech=speech)


def confirm(steps: Steps, attempt: Attempt, confirmed_at: float) -> tuple[Outcome | None, float]:
    """(None, when the slot was last confirmed) when the run's fence and the attempt's
    slot (confirmed at ``confirmed_at``) may be sent on; else (FENCED or NO_SLOT, ...).
    Both younger than ``steps.fresh_seconds``: nothing to do; else one transaction
    stamps the fence and renews the slot (its token unchanged: nobody took it)."""
    run, slot = attempt.run, attempt.slot
    assert slot is not None  # a BEGUN attempt holds one
    if run.fenced.is_set():
        return Outcome.FENCED, confirmed_at
    began = time.monotonic()
    fresh = steps.fresh_seconds
    if began - confirmed_at <= fresh and began - run.fenced_at <= fresh:
        return None, confirmed_at

    def work(uow: RunUnit) -> Outcome | None:
        if not uow.runs.stamp_job_progress(run.job_id, run.attempt):
            return Outcome.FENCED
        return None if uow.slots.renew_slot(slot) else Outcome.NO_SLOT

    outcome = steps.fenced_tx(run, work, lambda o: o is not Outcome.FENCED)
    if outcome is Outcome.FENCED:
        run.fenced.set()
    return outcome, began if outcome is None else confirmed_at


def _failed(steps: Steps, attempt: Attempt, exc: ProviderError) -> Attempt:
    """A failed call: RETRY after the policy's wait, or FAILED with its message."""
    settings, run = steps.settings, attempt.run
    if isinstance(exc, RetryableProviderError) and exc.status == 429 and exc.retry_after:
        # Capped at the call timeout, the longest wait an item accepts: a longer one fails
        # that item as rate-limited and must not stall every other job.
        steps.gate_of(attempt).pause(min(exc.retry_after, settings.tts_timeout_seconds))
    step = after_failure(
        exc,
        attempt.number,
        max_attempts=settings.tts_max_attempts,
        timeout_seconds=settings.tts_timeout_seconds,
    )
    if isinstance(exc, RefusedKeyError) and run.failure is None:
        # Every other item would be refused the same way: the run starts nothing more
        # and ends FAILED with the provider's message.
        run.failure = exc
    if isinstance(step, PermanentProviderError):
        log.warning(
            "provider failure job=%s attempt=%s item=%s status=%s: %s",
            run.job_id, run.attempt, attempt.item_id, step.status, step.message,
        )  # fmt: skip
        return attempt.to(Outcome.FAILED, error=step.message)
    return attempt.to(Outcome.RETRY, wait=step)


def _count(steps: Steps, attempt: Attempt, error: ProviderError | None, seconds: float) -> None:
    """Count the call: its label, latency and billed units (none when not sent)."""
    label = call_label(error)
    delivery = Delivery.RECEIVED if error is None else error.delivery
    sent = delivery is not Delivery.NOT_SENT
    billed = steps.provider_for(attempt).billed(attempt.text) if sent else 0
    metrics.record_provider_call(label, seconds, billed, in_doubt=delivery is Delivery.IN_DOUBT)
