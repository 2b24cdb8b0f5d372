"""begin: take what one attempt needs, in ONE short fenced transaction.

The first attempt and every retry come here. The fence (the job row at the run's
attempt, under its lock); for the first attempt the item PENDING -> GENERATING with its
fingerprint looked up: found, the item is DONE right here with the audio it shares (no
call, no slot, no reservation). Then a provider slot (the gate's compare-and-set) and
the characters reserved (the budget's). The slot comes first: a begin that finds none
(most of them, while jobs wait for slots) rolls back before it locks the organization's
month row, which every begin of the organization needs; the bill comes last, so that row
is held only for its own statements and the commit.

A commit whose acknowledgement was lost is retried; the retry first reads whether the
reservation the lost one made exists, and if so takes that commit's attempt as its own
(its item started, its slot and reservation held) instead of finding the item started
by nobody it knows and leaving that slot and those characters billed for no call.

No free slot: the transaction rolls back and the item waits on the gate (keeping its
fence fresh), then tries again: this is the only place an item waits for a slot. Over
budget: it rolls back too, and ``finish`` stops the run's starts.
"""

from __future__ import annotations

import functools
import time

from speechbatch.adapters.uow import RunUnit
from speechbatch.errors import DatabaseUnavailable
from speechbatch.runner.attempt import Attempt, Outcome
from speechbatch.runner.lexicon import checked
from speechbatch.runner.steps import Steps
from speechbatch.runner.transactions import Rollback

# Outcomes whose transaction committed a winning fence.
_FENCE_HELD = (Outcome.BEGUN, Outcome.REUSED)


def begin(steps: Steps, attempt: Attempt) -> Attempt:
    """The attempt BEGUN (its slot and reservation held), or why not: REUSED, SKIPPED,
    OVER_BUDGET, FENCED, NOT_SENT (the run began to stop while it waited for a slot)."""
    run = attempt.run
    waiting = steps.waiting(run)
    tried: list[Attempt] = []  # what a try made, in case its commit's answer is lost
    try:
        while True:
            mark = steps.gate_of(attempt).mark(run.job_id)
            began = time.monotonic()
            try:
                answer = steps.fenced_tx(
                    run,
                    lambda uow: _begin_or_lost(steps, uow, attempt, tried),
                    lambda a: a.outcome in _FENCE_HELD,
                )
            except DatabaseUnavailable:
                _owe_what_a_lost_commit_took(steps, tried)
                raise
            if answer.outcome is Outcome.BEGUN:
                answer = answer.to(Outcome.BEGUN, confirmed_at=began)
            if answer.outcome is not Outcome.NO_SLOT:
                return _after(steps, answer)
            stop = steps.stop_reason(run)
            if stop is not None:
                return attempt.to(stop)
            waiting.set("slot")
            if not steps.keep_fence(run):
                return attempt.to(Outcome.FENCED)
            steps.gate_of(attempt).wait(mark, run.job_id, answer.at_share)
    finally:
        waiting.done()


def _begin_or_lost(
    steps: Steps, uow: RunUnit, attempt: Attempt, tried: list[Attempt]
) -> Attempt | Rollback[Attempt]:
    """The attempt that a try whose acknowledgement was lost began, when its commit
    happened after all; else a begin."""
    if tried:
        lost = tried[-1]  # kept: this commit's answer may be lost too
        if lost.reservation is not None and uow.spending.reservation_made(lost.reservation):
            return lost
        tried.clear()
    answer = _begin_tx(steps, uow, attempt)
    if not isinstance(answer, Rollback) and answer.outcome is Outcome.BEGUN:
        tried.append(answer)
    return answer


def _owe_what_a_lost_commit_took(steps: Steps, tried: list[Attempt]) -> None:
    """The database stayed away after a begin whose commit may have happened: its slot
    and its characters are given back once it returns (compare-and-sets: nothing is
    given back that the commit did not take)."""
    for lost in tried:
        steps.tx.owe(functools.partial(_give_back, lost))


def _give_back(lost: Attempt, uow: RunUnit) -> None:
    if lost.reservation is not None:
        uow.spending.refund_reservation(lost.reservation)
    if lost.slot is not None:
        uow.slots.release_slot(lost.slot, lost.run.job_id)


def _begin_tx(steps: Steps, uow: RunUnit, attempt: Attempt) -> Attempt | Rollback[Attempt]:
    run = attempt.run
    previous, drained = attempt.previous_audio, False
    if not attempt.started:
        lookup = None if run.regenerate else attempt.fingerprint
        started = uow.runs.start_item(
            run.job_id, run.attempt, attempt.item_id, reuse_fingerprint=lookup
        )
        if started is None:
            return attempt.to(Outcome.SKIPPED)  # or fenced: ``_after`` tells them apart
        previous, drained = started.previous_audio_path, started.drained
        if started.reusable_item_id is not None:
            reused = _reuse(steps, uow, attempt, started.reusable_item_id)
            if reused is not None:
                return reused.to(Outcome.REUSED, drained=drained)
    elif not uow.runs.stamp_job_progress(run.job_id, run.attempt):
        return attempt.to(Outcome.FENCED)
    # The line's own provider: its slots, and its bill in its unit at its price.
    gate, provider = steps.gate_of(attempt), steps.provider_for(attempt)
    slot = gate.take(uow.slots, run.job_id, run.attempt)
    if slot is None:
        at_share = gate.holds_its_share(uow.slots, run.job_id)
        return Rollback(attempt.to(Outcome.NO_SLOT, at_share=at_share))
    reservation = uow.spending.reserve_characters(
        run.organization_id, run.job_id, run.attempt, provider.billed(attempt.text), provider.name
    )
    if reservation is None:
        return Rollback(attempt.to(Outcome.OVER_BUDGET))
    return attempt.to(
        Outcome.BEGUN,
        started=True,
        number=attempt.number + 1,
        slot=slot,
        reservation=reservation,
        previous_audio=previous,
        drained=drained,
    )


def _reuse(steps: Steps, uow: RunUnit, attempt: Attempt, source: int) -> Attempt | None:
    """The item made DONE with ``source``'s audio, in the begin's transaction; None when
    the source has none any more (the item is then sent)."""
    run = attempt.run
    reused = checked(uow, run, attempt.item_id, attempt.text, uow.runs.reuse_audio(
        run.job_id, run.attempt, attempt.item_id, source, attempt.fingerprint,
        spoken_text=attempt.text, keep=steps.settings.takes_kept,
    ))  # fmt: skip
    if not reused:
        return None
    return attempt.to(
        Outcome.REUSED, reused_from=source, orphans=reused.orphaned_audio_paths, started=True
    )


def _after(steps: Steps, attempt: Attempt) -> Attempt:
    """What a committed begin leads to: a start that found its item not startable is
    told apart from a fenced run by one more stamp; the other jobs' waiters learn that
    this job has nothing left to start (their fair shares grew)."""
    if attempt.outcome is Outcome.SKIPPED and not steps.fence(attempt.run):
        return attempt.to(Outcome.FENCED)
    if attempt.outcome is Outcome.FENCED:
        attempt.run.fenced.set()
    if attempt.drained:
        steps.shares_changed()
    return attempt
