"""Spending services: cancel, estimate, usage, budgets and the storage sweep.

Plain verb functions over a unit of work, like ``services``; no Flask, no HTTP here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from speechbatch.adapters import metrics
from speechbatch.adapters.models import ItemStatus
from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.providers.registry import resolve
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.ledger import Spending, Usage
from speechbatch.adapters.storage import TEMP_PREFIX, StepNotSupported
from speechbatch.adapters.uow import UowFactory
from speechbatch.config import Settings
from speechbatch.domain.editing import Selection, parse_options
from speechbatch.domain.fingerprints import fingerprinter
from speechbatch.domain.lexicon import EMPTY, Lexicon, Unspeakable
from speechbatch.errors import BudgetExceeded, NotFound, NotGenerating, ValidationError
from speechbatch.services.lexicon import compiled_lexicon, spoken_now
from speechbatch.services.ports import RunControl, Storage

log = logging.getLogger(__name__)

# gc leaves files younger than this alone: a live run may have just written them.
GC_MIN_AGE_SECONDS = 3600.0
# An estimate applies the rules itself to the lines whose spoken text the stale pass has
# not written yet for this long at most (one line's work more); the rest are pending.
INLINE_SECONDS = 0.1


@dataclass(frozen=True)
class CallPlan:
    """What a click would send: calls, their characters, and items that would reuse audio."""

    calls: int
    characters: int
    reused_items: int
    smallest_call: int | None
    # Items the lexicon cannot make a spoken text of within bounds (too long): a run
    # ends them ERROR, sending and billing nothing.
    too_long_items: int = 0
    # Items whose spoken text the stale pass has not written yet (and this request did
    # not compute in its time): not counted above.
    pending_items: int = 0
    # The provider of the job's voice ("": the default).
    provider: str = ""


def plan_calls(requests: Iterable[tuple[int, str]], existing: set[str]) -> CallPlan:
    """Plan a run over (characters, fingerprint) pairs, given fingerprints that have
    audio already.

    Identical requests in one run are sent once; the others, and requests whose audio
    exists, cost nothing.
    """
    calls = characters = reused = 0
    smallest: int | None = None
    seen: set[str] = set()
    for length, fingerprint in requests:
        if fingerprint in seen or fingerprint in existing:
            reused += 1
            continue
        seen.add(fingerprint)
        calls += 1
        characters += length
        smallest = length if smallest is None else min(smallest, length)
    return CallPlan(calls, characters, reused, smallest)


@dataclass(frozen=True)
class _Requests:
    """What a click would ask of the provider, before reuse: (characters, fingerprint)
    of each item to send, and the items too long or not known yet (pending)."""

    calls: tuple[tuple[int, str], ...]
    too_long: int
    pending: int
    # The provider of the job's voice (one of several): its price quotes the calls.
    provider: str = ""


# The requests of an estimate, by (job, its version and birth, lexicon version, limit,
# selection):
# a job's version changes with every write of it or its items (the stale pass's too),
# so an entry is never outdated; reuse is looked up on every estimate. Repeated
# estimates of a big job (its page, a client that polls) read one row, not every line.
_requests_cache: dict[tuple[Any, ...], _Requests] = {}
_requests_lock = threading.Lock()
_REQUESTS_CACHED = 32


def _requests(
    repo: Spending, provider: TTSProvider, user: UserRecord, job_id: int, regenerate: bool,
    selection: Selection | None, lexicon: Lexicon, inline_seconds: float,
) -> _Requests:  # fmt: skip
    stamp = repo.job_stamp(job_id, user.organization_id)
    if stamp is None:
        raise NotFound("job not found")
    key = (job_id, *stamp, lexicon.version, lexicon.limit, regenerate, repr(selection))
    with _requests_lock:
        found = _requests_cache.get(key)
    if found is not None:
        return found
    made = _requests_of(repo, provider, user, job_id, regenerate, selection, lexicon,
                        inline_seconds)  # fmt: skip
    if not made.pending:
        with _requests_lock:
            if len(_requests_cache) >= _REQUESTS_CACHED:
                _requests_cache.pop(next(iter(_requests_cache)))
            _requests_cache[key] = made
    return made


def _requests_of(
    repo: Spending, provider: TTSProvider, user: UserRecord, job_id: int, regenerate: bool,
    selection: Selection | None, lexicon: Lexicon, inline_seconds: float,
) -> _Requests:  # fmt: skip
    found = repo.job_items(job_id, user.organization_id)
    if found is None:
        raise NotFound("job not found")
    # As the run does: the voice's own provider calls, bills and fingerprints.
    speaker, _ = resolve(provider, found.voice)
    fingerprint = fingerprinter(speaker)
    options = parse_options(found.options)
    rows = _selected(found.rows, selection) if selection is not None else found.rows
    calls: list[tuple[int, str]] = []
    too_long = pending = 0
    deadline = time.monotonic() + inline_seconds
    for row in rows:
        if not regenerate and row.status == ItemStatus.DONE:
            continue
        try:
            text = spoken_now(row, lexicon, deadline)
        except Unspeakable:
            too_long += 1  # as the run does: ended ERROR, not sent, not billed
            continue
        if text is None:
            pending += 1
            continue
        # The line's own voice (its speaker's or the job's), as the run fingerprints it.
        made = fingerprint(user.organization_id, row.voice, text, options)
        calls.append((speaker.billed(text), made))
    return _Requests(tuple(calls), too_long, pending, speaker.name)


def _plan(
    repo: Spending,
    provider: TTSProvider,
    user: UserRecord,
    job_id: int,
    *,
    regenerate: bool,
    selection: Selection | None = None,
    lexicon: Lexicon = EMPTY,
    inline_seconds: float = 0.0,
) -> CallPlan:
    regenerate = regenerate or selection is not None
    asked = _requests(repo, provider, user, job_id, regenerate, selection, lexicon,
                      inline_seconds)  # fmt: skip
    # Regenerate never reuses earlier audio; it only sends identical texts once.
    existing = set() if regenerate else repo.reusable_fingerprints(fp for _, fp in asked.calls)
    return replace(
        plan_calls(asked.calls, existing), too_long_items=asked.too_long,
        pending_items=asked.pending, provider=asked.provider,
    )  # fmt: skip


def _selected(rows: list[Any], selection: Selection) -> list[Any]:
    """The rows a selection picks (ValidationError when it names an item not the job's)."""
    if selection.items is None:
        return [r for r in rows if r.stale]
    wanted = set(selection.items)
    if not wanted <= {r.id for r in rows}:
        raise ValidationError("items names an item that is not one of this job's", field="items")
    return [r for r in rows if r.id in wanted]


def price(settings: Settings, characters: int, provider: str = "") -> dict[str, Any] | None:
    """What ``characters`` cost at the configured price (``provider``'s own, if it has
    one), or None without one."""
    per_million = settings.limit_of(provider or settings.tts_provider)[2]
    if per_million is None:
        return None
    return {"amount": round(characters * per_million / 1_000_000, 6), "currency": settings.currency}


def estimate(
    uow_factory: UowFactory,
    settings: Settings,
    provider: TTSProvider,
    user: UserRecord,
    job_id: int,
    *,
    regenerate: bool = False,
    selection: Selection | None = None,
) -> dict[str, Any]:
    """What Generate/Retry (or Regenerate, of every item or of a ``selection``) would do
    now: calls, characters, reuse, price, and the items whose spoken text the lexicon
    would make too long (``too_long_items``: a run ends them ERROR without a call).

    Spoken texts are the ones the stale pass stored, so the rules are not applied to
    every line here; lines it has not done yet are computed for INLINE_SECONDS at most,
    and any left are ``pending_items`` (not counted: they are quoted once the pass has
    them, within seconds)."""
    with uow_factory(read_only=True) as uow:
        plan = _plan(
            uow.spending, provider, user, job_id, regenerate=regenerate, selection=selection,
            lexicon=compiled_lexicon(uow.lexicon, user.organization_id, provider.max_chars),
            inline_seconds=INLINE_SECONDS,
        )  # fmt: skip
    return {
        "items": plan.calls,
        "characters": plan.characters,
        "reused_items": plan.reused_items,
        "too_long_items": plan.too_long_items,
        "pending_items": plan.pending_items,
        "price": price(settings, plan.characters, plan.provider),
    }


def check_budget(
    spending: Spending,
    provider: TTSProvider,
    user: UserRecord,
    job_id: int,
    *,
    regenerate: bool,
    lexicon: Lexicon = EMPTY,
) -> None:
    """Raise BudgetExceeded when this month's budget cannot pay for any call a claim would
    make (inside the claim's transaction: ``spending`` is its repository).

    Only a hint for the person clicking: the reservation before each call is the guard.
    When the budget covers the job's longest text still to send, every call fits and
    nothing more is read; only a budget that nearly ran out plans the run (its items,
    fingerprints and reusable audio), a read that grows with the job.
    """
    usage = spending.usage(user.organization_id)
    remaining = usage.remaining_characters
    if remaining is None:
        return
    longest = spending.longest_unsent(job_id, user.organization_id, regenerate=regenerate)
    if longest is None or longest <= remaining:
        return  # every call fits (or no such job: the claim says so)
    plan = _plan(
        spending, provider, user, job_id,
        regenerate=regenerate, lexicon=lexicon, inline_seconds=INLINE_SECONDS,
    )  # fmt: skip
    if plan.smallest_call is not None and plan.smallest_call > remaining:
        metrics.BUDGET_REFUSALS.labels(where="claim").inc()
        log.warning(
            "claim refused by the budget job=%s remaining=%s smallest_call=%s",
            job_id, remaining, plan.smallest_call,
        )  # fmt: skip
        raise BudgetExceeded(
            f"the monthly budget cannot pay for any item: {_spent(usage)}, and the smallest "
            f"item to send needs {plan.smallest_call:,}; raise the budget to continue"
        )


def _spent(usage: Usage) -> str:
    return (
        f"{usage.billed_characters:,} of {usage.budget_characters or 0:,} characters billed "
        f"in {usage.month}, {usage.remaining_characters or 0:,} left"
    )


def usage_view(uow_factory: UowFactory, settings: Settings, user: UserRecord) -> dict[str, Any]:
    """This month's ledger of the user's organization, against its budget."""
    with uow_factory(read_only=True) as uow:
        usage = uow.spending.usage(user.organization_id)
        by_provider = uow.spending.usage_by_provider(user.organization_id)
    return {
        "month": usage.month,
        "billed_characters": usage.billed_characters,
        "provider_calls": usage.provider_calls,
        "budget_characters": usage.budget_characters,
        "remaining_characters": usage.remaining_characters,
        # Of the billed figures: calls whose request was written and whose answer was lost.
        "in_doubt_calls": usage.in_doubt_calls,
        "in_doubt_characters": usage.in_doubt_characters,
        # What each provider billed (in its unit) and how many calls went to it.
        "providers": [
            {"provider": p.provider or settings.tts_provider, "billed": p.billed, "calls": p.calls}
            for p in by_provider
        ],
    }


def set_budget(uow_factory: UowFactory, org_slug: str, characters: int | None) -> None:
    """Set (None: remove) an organization's monthly budget of billed characters."""
    if characters is not None and characters < 0:
        raise ValidationError("the budget must be zero or more characters", field="characters")
    with uow_factory() as uow:
        if uow.spending.set_budget(org_slug.strip(), characters) is None:
            raise NotFound(f"no organization {org_slug}")
        uow.commit()
    log.info("budget set org=%s characters=%s", org_slug, characters)


def cancel_generation(
    uow_factory: UowFactory, runner: RunControl, user: UserRecord, job_id: int
) -> int:
    """Cancel the job's live run: one compare-and-set at its attempt; the fence does the rest.

    No item starts after this returns; calls in flight are discarded when they answer.
    Returns the cancelled run's attempt.
    """
    with uow_factory() as uow:
        attempt = uow.runs.live_attempt(job_id, user.organization_id)
        if attempt is None:
            if uow.jobs.claim_refusal(job_id, user.organization_id) == "not_found":
                raise NotFound("job not found")
            raise NotGenerating()
        message = f"cancelled by {user.email}; Retry resumes without paying again for DONE items"
        if not uow.runs.cancel_run(job_id, attempt, user.id, message):
            raise NotGenerating()
        uow.commit()
    runner.cancel(job_id, attempt)
    metrics.CANCELS.inc()
    metrics.RUNS.labels(outcome="CANCELLED").inc()
    log.warning("run cancelled job=%s attempt=%s by=%s", job_id, attempt, user.email)
    return attempt


@dataclass(frozen=True)
class Collected:
    """What ``gc`` did: the keys it deleted (unfinished uploads as ``KEY (unfinished
    upload)``), and the steps it skipped because the store lacks them, in words."""

    deleted: list[str]
    skipped: list[str]


def collect_garbage(
    uow_factory: UowFactory, storage: Storage, *, min_age_seconds: float = GC_MIN_AGE_SECONDS
) -> Collected:
    """Delete stored files that no item and no export refers to, older than ``min_age``.

    Temporary files and unfinished multipart uploads (of writes a killed process never
    finished) go too; on a store without multipart listing that step is skipped (and
    said so), and the objects are swept all the same.
    """
    skipped = []
    try:
        aborted = storage.abort_uploads_older_than(min_age_seconds)
    except StepNotSupported as exc:
        aborted = []
        skipped.append(f"aborting unfinished multipart uploads: {exc.strerror}")
        log.warning("gc skipped aborting unfinished uploads: %s", exc.strerror)
    keys = list(storage.keys_older_than(min_age_seconds))
    temporary = [k for k in keys if PurePosixPath(k).name.startswith(TEMP_PREFIX)]
    others = [k for k in keys if not PurePosixPath(k).name.startswith(TEMP_PREFIX)]
    with uow_factory(read_only=True) as uow:
        referenced = uow.spending.referenced_keys(others)
    deleted = temporary + [k for k in others if k not in referenced]
    for key in deleted:
        storage.delete(key)
    log.info("gc deleted %s file(s) and %s unfinished upload(s)", len(deleted), len(aborted))
    return Collected(sorted(deleted + aborted), skipped)
