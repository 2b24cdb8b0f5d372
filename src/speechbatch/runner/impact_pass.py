"""The impact pass: background work that counts what saving rules would make stale (the
lexicon's dry runs, ``POST /api/lexicon/impact``), so that no request reads every DONE
line of an organization.

A stored request is claimed by compare-and-set under a lease (``run_due_impacts``: any
process's background tick, or the process that answered the POST, at once) and reads
the organization's DONE items in (job, position) order in chunks, each one short read
bounded in rows and time; the counts and the cursor are then written in one statement
that renews the lease and that only the lease's holder wins. A turn gives its lease back
after a slice of work, so one large organization never holds another's count; a
request whose worker died is claimed again once its lease runs out and goes on from the
cursor it last wrote, its counts exact.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import replace

from speechbatch.adapters.repositories.impacts import ImpactClaim, ImpactProgress
from speechbatch.adapters.repositories.stale_marks import DoneItem
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain.lexicon import Lexicon, LexiconError, parse_rules
from speechbatch.runner.stale_pass import Outcome, StalePasses
from speechbatch.services.lexicon import stale_now

log = logging.getLogger(__name__)

# A request's lease: renewed by every chunk, so only a dead or frozen process lets it run out.
IMPACT_LEASE_SECONDS = 30.0
# Items per chunk: one short read.
CHUNK = 2000
# A chunk stops counting after this long and writes what it counted (however much work
# the rules are on each line); a turn gives its lease back after SLICE_SECONDS.
CHUNK_SECONDS = 1.0
SLICE_SECONDS = 2.0
# Requests are deleted this long after they were asked (the page that polls one has
# long left), at most every CLEAN_EVERY_SECONDS by each process.
KEEP_SECONDS = 3600.0
CLEAN_EVERY_SECONDS = 300.0


def count(
    rows: Iterable[DoneItem], lexicon: Lexicon, before: ImpactProgress, deadline: float
) -> ImpactProgress:
    """The progress after reading ``rows`` (in (job, position) order, after the cursor
    of ``before``): at least one row, then until ``deadline`` (``time.monotonic()``). A
    line counts when it is not stale now and the rules would make it stale; its job
    counts when it is not the last job counted (a job's rows come together)."""
    job, position, counted = before.after_job, before.after_position, before.counted_job
    lines, jobs, checked = before.lines, before.jobs, before.checked
    for item in rows:
        if checked > before.checked and time.monotonic() > deadline:
            break
        if not item.stale and stale_now(item, lexicon):
            lines += 1
            if item.job_id != counted:
                jobs, counted = jobs + 1, item.job_id
        job, position, checked = item.job_id, item.position, checked + 1
    return ImpactProgress(job, position, counted, lines, jobs, checked, before.total)


def _rules(stored: str, max_chars: int) -> Lexicon | None:
    """The request's rules compiled (None: they cannot be used, which the POST checked)."""
    try:
        return Lexicon.compile(parse_rules(json.loads(stored)), limit=max_chars)
    except (LexiconError, ValueError):
        return None


def impact_pass(
    uow_factory: UowFactory, claim: ImpactClaim, max_chars: int, until: float
) -> Outcome:
    """A turn of a claimed request, until ``until`` (``time.monotonic()``): chunks of
    the organization's DONE items (of at most ``max_chars`` characters) counted, each
    written with its cursor while the lease is still this claim's."""
    org = claim.organization_id
    with uow_factory(read_only=True) as uow:
        state = uow.impacts.impact(org, claim.id)
    lexicon = None if state is None else _rules(state.rules, max_chars)
    if state is None or lexicon is None:
        with uow_factory() as uow:
            failed = uow.impacts.fail_impact(claim)
            uow.commit()
        log.warning("impact request failed id=%s org=%s: its rules cannot be used", claim.id, org)
        return Outcome.DONE if failed else Outcome.LOST
    progress = state.progress
    if progress.total is None:
        with uow_factory(read_only=True) as uow:
            progress = replace(progress, total=uow.impacts.count_done_items(org))
    while True:
        with uow_factory(read_only=True) as uow:
            rows = uow.impacts.done_items_after(
                org, progress.after_job, progress.after_position, CHUNK
            )
        after = count(rows, lexicon, progress, min(until, time.monotonic() + CHUNK_SECONDS))
        finished = len(rows) < CHUNK and after.checked - progress.checked == len(rows)
        with uow_factory() as uow:
            won = uow.impacts.advance_impact(claim, after, IMPACT_LEASE_SECONDS, finished)
            uow.commit()
        if not won:
            return Outcome.LOST
        if finished:
            log.info("impact counted id=%s org=%s lines=%s", claim.id, org, after.lines)
            return Outcome.DONE
        if time.monotonic() > until:  # a turn counts one chunk at least
            return Outcome.PAUSED
        progress = after


def run_due_impacts(uow_factory: UowFactory, max_chars: int, most: int = 100) -> int:
    """Claim and count waiting requests, a slice at a time, until none is left (at most
    ``most`` turns); how many finished. Any process's background tick calls it."""
    done = 0
    for _ in range(most):
        with uow_factory(read_only=True) as uow:
            if not uow.impacts.impact_due():
                break
        with uow_factory() as uow:
            claim = uow.impacts.claim_impact(IMPACT_LEASE_SECONDS)
            uow.commit()
        if claim is None:  # another process won this one: others may still wait
            continue
        outcome = Outcome.LOST
        try:
            outcome = impact_pass(uow_factory, claim, max_chars, time.monotonic() + SLICE_SECONDS)
        finally:
            if outcome is not Outcome.DONE:
                with uow_factory() as uow:  # its turn (or a failure's) ends now
                    uow.impacts.release_impact(claim)
                    uow.commit()
        if outcome is Outcome.LOST:
            log.warning("impact request lost its lease id=%s", claim.id)
        done += outcome is Outcome.DONE
    return done


def clean_old_impacts(uow_factory: UowFactory, keep_seconds: float = KEEP_SECONDS) -> int:
    """Delete the requests asked more than ``keep_seconds`` ago; how many."""
    with uow_factory() as uow:
        deleted = uow.impacts.delete_old_impacts(keep_seconds)
        uow.commit()
    return deleted


class ImpactPasses(StalePasses):
    """This process's thread that counts waiting requests: started after a POST (so the
    count begins at once, not at the next tick) and by the background tick; at most one
    at a time. It also deletes old requests now and then. A failure is logged: the lease
    runs out and a tick retries."""

    thread_name = "speechbatch-lexicon-impact"
    failure = "impact pass failed: the next background tick retries it"

    def __init__(self, uow_factory: UowFactory, max_chars: int) -> None:
        super().__init__(uow_factory, max_chars)
        self._cleaned_at: float | None = None

    def _run(self) -> None:
        now = time.monotonic()
        if self._cleaned_at is None or now - self._cleaned_at > CLEAN_EVERY_SECONDS:
            self._cleaned_at = now
            clean_old_impacts(self._uow_factory)
        run_due_impacts(self._uow_factory, self._max_chars)
