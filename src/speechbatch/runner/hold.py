"""What one begun attempt holds, its provider slot and its reservation, owned by one
context manager.

``holding`` gives both back when its block ends, in one transaction: the slot always
(the call's answer came, or nothing was sent: before the audio is measured and stored),
the reservation unless the request reached the provider. Inside the block ``send`` says
how far the request got (``Hold.delivery``): not sent (refunded), in doubt (written, its
answer lost: billed and counted as in doubt), or received (billed). Both give-backs are
compare-and-sets, so a retried transaction gives nothing back twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from speechbatch.adapters.providers.base import Delivery
from speechbatch.adapters.uow import RunUnit
from speechbatch.errors import DatabaseUnavailable
from speechbatch.runner.attempt import Attempt
from speechbatch.runner.steps import Steps

log = logging.getLogger(__name__)


class Hold:
    """How far the held attempt's request got, as ``send`` learns it."""

    def __init__(self) -> None:
        self.delivery = Delivery.NOT_SENT
        # The provider answered with audio: the item's thread goes on to its next item.
        self.succeeded = False


@contextmanager
def holding(steps: Steps, attempt: Attempt) -> Iterator[Hold]:
    """Hold a BEGUN attempt's slot and reservation for the block (see the module)."""
    hold = Hold()
    try:
        yield hold
    finally:
        _give_back(steps, attempt, hold)


def _give_back(steps: Steps, attempt: Attempt, hold: Hold) -> None:
    run, slot, reservation = attempt.run, attempt.slot, attempt.reservation

    def work(uow: RunUnit) -> None:
        if reservation is not None and hold.delivery is Delivery.NOT_SENT:
            uow.spending.refund_reservation(reservation)
        elif reservation is not None and hold.delivery is Delivery.IN_DOUBT:
            uow.spending.mark_in_doubt(reservation)
        if slot is not None:
            uow.slots.release_slot(slot, run.job_id)

    try:
        steps.tx(work)
    except DatabaseUnavailable:
        # Owed until the database returns: an unsent call's characters are refunded then.
        log.warning("database away: the give-back of job=%s is owed", run.job_id)
        steps.tx.owe(work)
    except Exception:
        # The slot comes back anyway after the longest hold.
        log.exception("could not give back an attempt's slot job=%s", run.job_id)
    if slot is not None:
        steps.gate_of(attempt).released(run.job_id, lane_goes_on=hold.succeeded)
