"""pace, and the backoff between attempts: the waits before a call.

``pace`` waits, holding the attempt's slot, until a call may start: the deployment's pace
(PROVIDER_RPM) and any 429's Retry-After pause. The slot is held while it waits (a slot
taken after the wait would let the booked starts bunch up behind busy slots); ``send``
confirms it right before the request leaves, so a slot given to someone else meanwhile
is never sent on. ``backoff`` waits before a retry, holding nothing.
"""

from __future__ import annotations

from speechbatch.runner.attempt import Attempt, Outcome
from speechbatch.runner.gate import sleep_unless
from speechbatch.runner.steps import Steps


def pace(steps: Steps, attempt: Attempt) -> Attempt:
    """The BEGUN attempt once it may be sent; NOT_SENT or FENCED when the run began to
    stop meanwhile (its slot and reservation then go back)."""
    if attempt.outcome is not Outcome.BEGUN:
        return attempt
    run = attempt.run
    waiting = steps.waiting(run)
    try:
        stopping = lambda: steps.stop_reason(run, started=True) is not None  # noqa: E731
        if steps.gate_of(attempt).wait_for_pace(stopping, waiting):  # its provider's pace
            return attempt
    finally:
        waiting.done()
    return attempt.to(steps.stop_reason(run, started=True) or Outcome.NOT_SENT)


def backoff(steps: Steps, attempt: Attempt) -> Attempt:
    """Wait ``attempt.wait`` seconds before a retry; NOT_SENT or FENCED when the run
    began to stop meanwhile."""
    if attempt.outcome is not Outcome.RETRY:
        return attempt
    run = attempt.run
    if sleep_unless(attempt.wait, lambda: steps.stop_reason(run, started=True) is not None):
        return attempt
    return attempt.to(steps.stop_reason(run, started=True) or Outcome.NOT_SENT)
