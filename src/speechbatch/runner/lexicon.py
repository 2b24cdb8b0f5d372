"""A run and a lexicon change: the run sends every item with the rules it began with;
an item that becomes DONE after the rules changed is checked against the new ones."""

from __future__ import annotations

from typing import TYPE_CHECKING

from speechbatch.adapters.repositories.items import FinishedItem
from speechbatch.adapters.uow import RunUnit
from speechbatch.domain.editing import spoken_text
from speechbatch.services.lexicon import compiled_lexicon

if TYPE_CHECKING:
    from speechbatch.runner.item import Run


def checked(uow: RunUnit, run: Run, item_id: int, spoken: str, done: FinishedItem) -> FinishedItem:
    """A DONE move's answer ``done``, checked in its transaction: when the
    organization's rules changed since the run began (a PUT while it was sending), the
    item is marked stale if the rules now give another spoken text than it was made from.

    No gap: the PUT's stale pass takes each job row's lock before it reads that job's
    items, and the DONE move reads the version after its fence took the same lock. So
    the pass either marked this job before the fence (then the version read here is the
    new one) or reads it after this transaction commits (then it sees this take)."""
    if not done or done.lexicon_version == run.lexicon.version:
        return done
    now = compiled_lexicon(uow.lexicon, run.organization_id)
    if spoken_text(done.text, now) != spoken:
        uow.runs.mark_stale(run.job_id, item_id)
    return done
