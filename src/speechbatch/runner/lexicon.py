"""A run and the lexicon: the run sends every item with the rules it began with; an item
that becomes DONE after the rules changed is checked against the new ones; an item the
rules cannot make a spoken text of within bounds (too long) ends ERROR, never sent nor
billed."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from speechbatch.adapters.repositories.items import FinishedItem
from speechbatch.adapters.uow import RunUnit
from speechbatch.domain.lexicon import Unspeakable
from speechbatch.services.lexicon import compiled_lexicon

if TYPE_CHECKING:
    from speechbatch.runner.attempt import Run
    from speechbatch.runner.steps import Steps

log = logging.getLogger(__name__)


def checked(uow: RunUnit, run: Run, item_id: int, spoken: str, done: FinishedItem) -> FinishedItem:
    """A DONE move's answer ``done``, checked in its transaction: when the
    organization's rules changed since the run began (a PUT while it was sending), the
    item is marked stale if the rules now give another spoken text than it was made from
    (or none within bounds, as the stale pass judges it).

    No gap: the PUT's stale pass takes each job row's lock before it reads that job's
    items, and the DONE move reads the version after its fence took the same lock. So
    the pass either marked this job before the fence (then the version read here is the
    new one) or reads it after this transaction commits (then it sees this take)."""
    if not done or done.lexicon_version == run.lexicon.version:
        return done
    now = compiled_lexicon(uow.lexicon, run.organization_id, run.lexicon.limit)
    try:
        outdated = now.spoken(done.text) != spoken
    except Unspeakable:
        outdated = True
    if outdated:
        uow.runs.mark_stale(run.job_id, item_id)
    return done


def fail_unspeakable(steps: Steps, run: Run, item_id: int, message: str) -> bool:
    """End an item ERROR with ``message`` (its spoken text would be too long) in one
    fenced transaction: started and failed at once, so nothing is reserved, billed or
    sent. False when the run may no longer write."""

    drained = False

    def work(uow: RunUnit) -> FinishedItem | None:
        nonlocal drained
        started = uow.runs.start_item(run.job_id, run.attempt, item_id)
        if started is None:
            return None
        drained = started.drained
        return uow.runs.finish_item(run.job_id, run.attempt, item_id, error_message=message)

    if not steps.fenced_tx(run, work, bool):
        return steps.fence(run)  # fenced, or the item was not startable
    if drained:
        steps.shares_changed()
    log.warning(
        "item not sent job=%s attempt=%s item=%s: %s", run.job_id, run.attempt, item_id, message
    )
    return True
