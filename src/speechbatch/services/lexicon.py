"""The pronunciation lexicon: read, replace, preview, count what a change makes stale,
and the stale pass that follows a change.

A PUT only replaces the rules and increments the version; the stale marks are written
by a pass (``run_due_passes``) that any process's background tick (or the process that
answered the PUT, at once) claims by compare-and-set under a lease. A pass that dies is
claimed again once its lease runs out, and a PUT during a pass leaves the newer version
due, so the marks always end up answering the newest rules.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from contextlib import closing
from typing import Any

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.lexicon import (
    DoneItem,
    Lexicons,
    LexiconStamp,
    PassClaim,
)
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain.lexicon import Lexicon, LexiconError, LexiconTimeout, Rule, parse_rules
from speechbatch.errors import InvalidRule, RuleTimeout, ValidationError

log = logging.getLogger(__name__)

# A pass's lease: renewed by every chunk (a chunk takes milliseconds), so only a dead
# or frozen process lets it run out.
PASS_LEASE_SECONDS = 30.0
# DONE items per chunk: one short transaction under the job row's shared lock.
CHUNK = 2000
# A chunk stops judging after this long and writes what it judged: lines that rules run
# out of time on (up to APPLY_SECONDS each) never make one chunk outlast the lease.
CHUNK_SECONDS = PASS_LEASE_SECONDS / 3
MAX_PREVIEW = 100_000

_cache: dict[tuple[int, LexiconStamp], Lexicon] = {}
_cache_lock = threading.Lock()
_CACHE_SIZE = 64


def compiled_lexicon(repo: Lexicons, organization_id: int) -> Lexicon:
    """The organization's rules now, compiled once per (organization, version) in this
    process: one small read when they are cached."""
    now = repo.stamp(organization_id)
    with _cache_lock:
        found = _cache.get((organization_id, now))
    if found is not None:
        return found
    stamp, rules = repo.rules(organization_id)
    lexicon = Lexicon.compile(rules, stamp.version, checked=True)
    with _cache_lock:
        if len(_cache) >= _CACHE_SIZE:
            _cache.pop(next(iter(_cache)))
        _cache[(organization_id, stamp)] = lexicon
    return lexicon


def _rules_of(body: Any) -> list[Rule]:
    if not isinstance(body, dict) or "rules" not in body:
        raise ValidationError('give the rules: {"rules": [...]}', field="rules")
    try:
        return parse_rules(body["rules"])
    except LexiconError as exc:
        raise InvalidRule(str(exc), field="rules") from None


def _answer(uow: Any, organization_id: int) -> dict[str, Any]:
    stamp, rules = uow.lexicon.rules(organization_id)
    state = uow.lexicon.state(organization_id)
    return {
        "rules": [r.as_json() for r in rules],
        "version": stamp.version,
        "stale_pass": "running" if state.stale_version < state.version else "done",
    }


def get_lexicon(uow_factory: UowFactory, user: UserRecord) -> dict[str, Any]:
    """The organization's rules, version, and whether the stale marks are still being
    written (``stale_pass``: ``running`` or ``done``)."""
    with uow_factory(read_only=True) as uow:
        return _answer(uow, user.organization_id)


def put_lexicon(uow_factory: UowFactory, user: UserRecord, body: Any) -> dict[str, Any]:
    """Replace the organization's rules (checked first: an invalid one changes nothing)
    and increment the version; the stale pass for it is then due."""
    rules = _rules_of(body)
    with uow_factory() as uow:
        uow.lexicon.replace_rules(user.organization_id, rules)
        answer = _answer(uow, user.organization_id)
        uow.commit()
    log.info(
        "lexicon replaced org=%s version=%s rules=%s by=%s",
        user.organization_id, answer["version"], len(rules), user.email,
    )  # fmt: skip
    return answer


def preview(uow_factory: UowFactory, user: UserRecord, body: Any) -> dict[str, Any]:
    """A text as it would be spoken with the organization's rules now."""
    text = body.get("text") if isinstance(body, dict) else None
    if not isinstance(text, str) or len(text) > MAX_PREVIEW:
        raise ValidationError(f"text must be a text of at most {MAX_PREVIEW:,} characters", "text")
    with uow_factory(read_only=True) as uow:
        lexicon = compiled_lexicon(uow.lexicon, user.organization_id)
    try:
        return {"spoken_text": lexicon.apply(text)}
    except LexiconTimeout as exc:
        raise RuleTimeout(str(exc), field="text") from None


def stale_now(item: DoneItem, lexicon: Lexicon) -> bool:
    """The stale predicate, the one the stale pass and a restore both ask: the take
    answered another text, voice or options than the job has now, or another spoken
    text than the rules give now. A line on which a rule runs out of time is stale:
    nothing shows that its audio says what would be sent (a run would end it ERROR)."""
    try:
        return _differs(item, lexicon)
    except LexiconTimeout as exc:
        log.warning("marked stale: %s job=%s item=%s", exc, item.job_id, item.id)
        return True


def _differs(item: DoneItem, lexicon: Lexicon) -> bool:
    """Whether the take answered another request than the job and the rules give now
    (raises LexiconTimeout when a rule runs out of time on the line)."""
    return item.other_reason or item.take_spoken_text != lexicon.apply(item.text)


def _would_be_stale(item: DoneItem, lexicon: Lexicon) -> bool:
    """``stale_now`` for a dry run: a rule that runs out of time is the person's to
    hear about before saving (RuleTimeout naming the rule and the line)."""
    try:
        return _differs(item, lexicon)
    except LexiconTimeout as exc:
        raise RuleTimeout(f"{exc} (job {item.job_id}, item {item.id})", field="rules") from None


def impact(uow_factory: UowFactory, user: UserRecord, body: Any) -> dict[str, Any]:
    """What saving these rules would make stale (a dry run, nothing is written):
    ``{"lines": N, "jobs": M}``, the DONE lines not stale now that would be; RuleTimeout
    when a rule runs out of time on one of them."""
    lexicon = Lexicon.compile(_rules_of(body))
    org = user.organization_id
    jobs: set[int] = set()
    lines = 0
    with uow_factory(read_only=True) as uow, closing(uow.lexicon.done_items(org)) as done:
        for item in done:
            if not item.stale and _would_be_stale(item, lexicon):
                lines += 1
                jobs.add(item.job_id)
    return {"lines": lines, "jobs": len(jobs)}


def split(
    rows: Iterable[DoneItem], lexicon: Lexicon, deadline: float
) -> tuple[list[int], list[int], int]:
    """The ids whose stale flag must change: (to become stale, to become fresh), and how
    many rows were judged: at least one, then until ``deadline`` (``time.monotonic()``)."""
    stale: list[int] = []
    fresh: list[int] = []
    judged = 0
    for item in rows:
        if judged and time.monotonic() > deadline:
            break
        now = stale_now(item, lexicon)
        if now != item.stale:
            (stale if now else fresh).append(item.id)
        judged += 1
    return stale, fresh, judged


def _mark_job(uow_factory: UowFactory, claim: PassClaim, lexicon: Lexicon, job_id: int) -> bool:
    """Mark one job's DONE items, a chunk per transaction; False when the lease is lost."""
    after = -1
    while True:
        with uow_factory() as uow:
            if not uow.lexicon.renew_pass(claim, PASS_LEASE_SECONDS):
                return False
            rows = uow.lexicon.lock_done_items(job_id, after, CHUNK)
            stale, fresh, judged = split(rows, lexicon, time.monotonic() + CHUNK_SECONDS)
            uow.lexicon.set_stale(job_id, stale, fresh)
            uow.commit()
        if judged == len(rows) < CHUNK:
            return True
        after = rows[judged - 1].position


def stale_pass(uow_factory: UowFactory, claim: PassClaim) -> bool:
    """Write the stale marks of a claimed organization (every DONE item, one job at a
    time) and record the version they answer; whether it finished under its grant."""
    with uow_factory(read_only=True) as uow:
        lexicon = compiled_lexicon(uow.lexicon, claim.organization_id)
        jobs = uow.lexicon.job_ids(claim.organization_id)
    # The rules read may be newer than the claimed version: the marks answer them.
    claim = PassClaim(claim.organization_id, claim.token, lexicon.version)
    for job in jobs:
        if not _mark_job(uow_factory, claim, lexicon, job):
            log.warning("stale pass lost its lease org=%s", claim.organization_id)
            return False
    with uow_factory() as uow:
        won = uow.lexicon.finish_pass(claim)
        uow.commit()
    log.info(
        "stale pass done org=%s version=%s won=%s", claim.organization_id, lexicon.version, won
    )
    return won


def run_due_passes(uow_factory: UowFactory, limit: int = 100) -> int:
    """Claim and run due stale passes until none is left (at most ``limit``); how many
    finished. Any process's background tick calls it."""
    done = 0
    for _ in range(limit):
        with uow_factory(read_only=True) as uow:
            if not uow.lexicon.pass_due():
                break
        with uow_factory() as uow:
            claim = uow.lexicon.claim_stale_pass(PASS_LEASE_SECONDS)
            uow.commit()
        if claim is None:
            break
        try:
            done += stale_pass(uow_factory, claim)
        except Exception:
            with uow_factory() as uow:
                uow.lexicon.release_pass(claim)
                uow.commit()
            raise
    return done


class StalePasses:
    """This process's thread that runs due stale passes: started after a PUT (so the
    marks are written at once, not at the next tick) and by the background tick; at
    most one at a time. A failure is logged: the lease runs out and a tick retries."""

    def __init__(self, uow_factory: UowFactory) -> None:
        self._uow_factory = uow_factory
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again = threading.Event()

    def nudge(self) -> None:
        """Run the due passes now, on this process's pass thread."""
        with self._lock:
            self._again.set()
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._work, name="speechbatch-lexicon-pass", daemon=True
            )
            self._thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._again.is_set():
                    self._thread = None
                    return
                self._again.clear()
            try:
                run_due_passes(self._uow_factory)
            except Exception:
                log.exception("stale pass failed: the next background tick retries it")

    def wait(self, timeout: float) -> None:
        """Wait for the pass thread to end (tests, a graceful stop)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
