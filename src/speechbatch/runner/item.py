"""One item: one value through four steps, begin → pace → send → finish.

    attempt = begin(attempt)             # begin.py: fence, start, reuse, slot, reservation
    with holding(attempt) as hold:       # hold.py: the slot and the reservation
        attempt = send(pace(attempt))    # pace.py: RPM and 429 waits; send.py: the call
    attempt = finish(attempt)            # finish.py: DONE, ERROR or PENDING again

Every step takes an ``Attempt`` and answers the next one (``attempt.py``); its
``outcome`` says what happened, and a step passes on an attempt it does not handle. A
retry (RETRY: after a backoff) and a slot lost before the call (NO_SLOT) go round to
``begin`` again, the same way as the first attempt. The slot and the reservation belong
to the ``holding`` block: they go back when it ends, the reservation only if the request
never reached the provider. No transaction or connection is open across ``send``, and
nothing is carried from one item to the next.

Every step acts for the provider of the line's own voice (its speaker's in the cast, else
the job's), resolved once here (``attempt.provider``): its slot, its pace, its
reservation, its call and its bill, so one job's lines on several providers never take
each other's slots.
"""

from __future__ import annotations

from speechbatch.runner.attempt import Attempt, Outcome, Run
from speechbatch.runner.begin import begin
from speechbatch.runner.finish import finish
from speechbatch.runner.hold import holding
from speechbatch.runner.pace import backoff, pace
from speechbatch.runner.send import send
from speechbatch.runner.steps import Steps

# Outcomes after which the same item begins again.
_AGAIN = (Outcome.RETRY, Outcome.NO_SLOT)


def run_item(
    steps: Steps, run: Run, item_id: int, spoken: str, fingerprint: str, voice: str = ""
) -> Attempt:
    """Take one item of ``run`` to its end (see the module) and answer its last attempt:
    SENT (DONE with new audio), REUSED (DONE, sharing audio), FAILED (ERROR), NOT_SENT
    or OVER_BUDGET (PENDING again), SKIPPED (not ours to start), or FENCED. ``voice``
    is the item's (its speaker's or the job's; empty: the job's)."""
    provider, provider_voice = steps.speaker(run, voice)
    attempt = Attempt(
        run, item_id, spoken, fingerprint, voice=voice or run.voice,
        provider=provider, provider_voice=provider_voice,
    )  # fmt: skip
    while True:
        attempt = begin(steps, attempt)
        if attempt.outcome is Outcome.BEGUN:
            with holding(steps, attempt) as hold:
                attempt = send(steps, pace(steps, attempt), hold)
        attempt = backoff(steps, attempt)
        if attempt.outcome not in _AGAIN:
            return finish(steps, attempt)
