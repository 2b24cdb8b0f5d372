"""The stale pass: background work that writes each item's spoken text under its
organization's lexicon, and the stale marks of DONE items, so that no request applies
the rules to a job's lines.

A pass is due while some job of an organization answers another lexicon version than
its own: after a PUT, and for a new job or an edited line. It is claimed by
compare-and-set under a lease (``run_due_passes``: any process's background tick, or
the process that answered the PUT, at once), works one job at a time in chunks, each
one short transaction bounded in rows and time, and gives its turn back after a slice
of work, so one organization's rules never hold another's pass. A pass that dies is
claimed again once its lease runs out; a PUT during a pass leaves its jobs due, so the
texts and marks always end up answering the newest rules.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Iterable

from speechbatch.adapters.repositories.lexicon import DoneItem, PassClaim, SpokenRow
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain.lexicon import Lexicon
from speechbatch.services.lexicon import compiled_lexicon, judged

log = logging.getLogger(__name__)

# A pass's lease: renewed by every chunk, so only a dead or frozen process lets it run out.
PASS_LEASE_SECONDS = 30.0
# Items per chunk: one short transaction under the job row's shared lock.
CHUNK = 2000
# A chunk stops judging after this long and writes what it judged (however much work
# the rules are on each line), and a pass gives its turn back after SLICE_SECONDS, to
# the organizations that waited longer.
CHUNK_SECONDS = 1.0
SLICE_SECONDS = 2.0


class Outcome(enum.Enum):
    """How a turn of a pass ended."""

    DONE = "done"  # every due job went through
    PAUSED = "paused"  # its slice ran out: the lease is given back, the pass stays due
    LOST = "lost"  # its lease was lost: another process holds the pass


def judge(rows: Iterable[DoneItem], lexicon: Lexicon, deadline: float) -> list[SpokenRow]:
    """What to write of each row (its spoken text and stale mark): at least one row,
    then until ``deadline`` (``time.monotonic()``)."""
    written: list[SpokenRow] = []
    for item in rows:
        if written and time.monotonic() > deadline:
            break
        written.append(judged(item, lexicon))
    return written


def _mark_job(
    uow_factory: UowFactory, claim: PassClaim, lexicon: Lexicon, job_id: int, until: float
) -> Outcome:
    """Write one job's spoken texts and marks, a chunk per transaction, until every item
    answers the lexicon's version (then the job records it) or the slice runs out."""
    after = -1
    while True:
        with uow_factory() as uow:
            if not uow.lexicon.renew_pass(claim, PASS_LEASE_SECONDS):
                return Outcome.LOST
            rows = uow.lexicon.lock_items_to_judge(job_id, lexicon.version, after, CHUNK)
            written = judge(rows, lexicon, min(until, time.monotonic() + CHUNK_SECONDS))
            uow.lexicon.record_spoken(job_id, lexicon.version, written)
            last = len(written) == len(rows) < CHUNK
            if last:
                uow.lexicon.finish_job(job_id, lexicon.version)
            uow.commit()
        if last:
            return Outcome.DONE
        if time.monotonic() > until:  # a turn writes one chunk at least
            return Outcome.PAUSED
        after = rows[len(written) - 1].position


def stale_pass(uow_factory: UowFactory, claim: PassClaim, max_chars: int, until: float) -> Outcome:
    """A turn of a claimed organization's pass, until ``until`` (``time.monotonic()``):
    its due jobs' spoken texts (items of at most ``max_chars`` characters) and marks."""
    with uow_factory(read_only=True) as uow:
        lexicon = compiled_lexicon(uow.lexicon, claim.organization_id, max_chars)
        jobs = uow.lexicon.due_jobs(claim.organization_id, lexicon.version)
    # The rules read may be newer than the claimed version: the texts answer them.
    claim = PassClaim(claim.organization_id, claim.token, lexicon.version)
    for job in jobs:
        outcome = _mark_job(uow_factory, claim, lexicon, job, until)
        if outcome is not Outcome.DONE:
            return outcome
        if time.monotonic() > until and job != jobs[-1]:
            return Outcome.PAUSED
    with uow_factory() as uow:
        won = uow.lexicon.finish_pass(claim)
        uow.commit()
    log.info(
        "stale pass done org=%s version=%s jobs=%s won=%s",
        claim.organization_id, lexicon.version, len(jobs), won,
    )  # fmt: skip
    return Outcome.DONE if won else Outcome.LOST


def run_due_passes(uow_factory: UowFactory, max_chars: int, most: int = 100) -> int:
    """Claim and run due stale passes, a slice at a time, until none is left (at most
    ``most`` turns); how many finished. Any process's background tick calls it."""
    done = 0
    for _ in range(most):
        with uow_factory(read_only=True) as uow:
            if not uow.lexicon.pass_due():
                break
        with uow_factory() as uow:
            claim = uow.lexicon.claim_stale_pass(PASS_LEASE_SECONDS)
            uow.commit()
        if claim is None:
            break
        outcome = Outcome.LOST
        try:
            outcome = stale_pass(uow_factory, claim, max_chars, time.monotonic() + SLICE_SECONDS)
        finally:
            if outcome is not Outcome.DONE:
                with uow_factory() as uow:  # its turn (or a failure's) ends now
                    uow.lexicon.release_pass(claim)
                    uow.commit()
        if outcome is Outcome.LOST:
            log.warning("stale pass lost its lease org=%s", claim.organization_id)
        done += outcome is Outcome.DONE
    return done


class StalePasses:
    """This process's thread that runs due stale passes: started after a PUT (so the
    marks are written at once, not at the next tick) and by the background tick; at
    most one at a time. A failure is logged: the lease runs out and a tick retries."""

    thread_name = "speechbatch-lexicon-pass"
    failure = "stale pass failed: the next background tick retries it"

    def __init__(self, uow_factory: UowFactory, max_chars: int) -> None:
        self._uow_factory = uow_factory
        self._max_chars = max_chars
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again = threading.Event()

    def nudge(self) -> None:
        """Run the due passes now, on this process's pass thread."""
        with self._lock:
            self._again.set()
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._work, name=self.thread_name, daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._again.is_set():
                    self._thread = None
                    return
                self._again.clear()
            try:
                self._run()
            except Exception:
                log.exception(self.failure)

    def _run(self) -> None:
        """One round of this thread's work (a subclass counts impact requests instead)."""
        run_due_passes(self._uow_factory, self._max_chars)

    def wait(self, timeout: float) -> None:
        """Wait for the pass thread to end (tests, a graceful stop)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
