"""Spending services: cancel, estimate, usage, budgets and the storage sweep.

Plain verb functions over a unit of work, like ``services``; no Flask, no HTTP here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from speechbatch.adapters import metrics
from speechbatch.adapters.models import ItemStatus
from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.ledger import Spending, Usage
from speechbatch.adapters.storage import TEMP_PREFIX
from speechbatch.adapters.uow import UowFactory
from speechbatch.config import Settings
from speechbatch.domain.editing import Selection, parse_options, spoken_text
from speechbatch.domain.fingerprints import fingerprinter
from speechbatch.domain.lexicon import Lexicon, LexiconTimeout
from speechbatch.errors import BudgetExceeded, NotFound, NotGenerating, ValidationError
from speechbatch.services.lexicon import compiled_lexicon
from speechbatch.services.ports import RunControl, Storage

log = logging.getLogger(__name__)

# gc leaves files younger than this alone: a live run may have just written them.
GC_MIN_AGE_SECONDS = 3600.0


@dataclass(frozen=True)
class CallPlan:
    """What a click would send: calls, their characters, and items that would reuse audio."""

    calls: int
    characters: int
    reused_items: int
    smallest_call: int | None
    # Items a lexicon rule runs out of time on: a run ends them ERROR, sending nothing.
    lexicon_timeouts: int = 0


def plan_calls(requests: Iterable[tuple[str, str]], existing: set[str]) -> CallPlan:
    """Plan a run over (text, fingerprint) pairs, given fingerprints that have audio already.

    Identical requests in one run are sent once; the others, and requests whose audio
    exists, cost nothing.
    """
    calls = characters = reused = 0
    smallest: int | None = None
    seen: set[str] = set()
    for text, fingerprint in requests:
        if fingerprint in seen or fingerprint in existing:
            reused += 1
            continue
        seen.add(fingerprint)
        calls += 1
        characters += len(text)
        smallest = len(text) if smallest is None else min(smallest, len(text))
    return CallPlan(calls, characters, reused, smallest)


def _plan(
    repo: Spending,
    provider: TTSProvider,
    user: UserRecord,
    job_id: int,
    *,
    regenerate: bool,
    selection: Selection | None = None,
    lexicon: Lexicon | None = None,
) -> CallPlan:
    found = repo.job_items(job_id, user.organization_id)
    if found is None:
        raise NotFound("job not found")
    fingerprint = fingerprinter(provider)
    options = parse_options(found.options)
    rows = _selected(found.rows, selection) if selection is not None else found.rows
    regenerate = regenerate or selection is not None
    requests: list[tuple[str, str]] = []
    timeouts = 0
    for row in rows:
        if not regenerate and row.status == ItemStatus.DONE:
            continue
        try:
            text = spoken_text(row.text, lexicon)
        except LexiconTimeout:
            timeouts += 1  # as the run does: ended ERROR, not sent, not billed
            continue
        requests.append((text, fingerprint(user.organization_id, found.voice, text, options)))
    # Regenerate never reuses earlier audio; it only sends identical texts once.
    existing = set() if regenerate else repo.reusable_fingerprints(fp for _, fp in requests)
    return replace(plan_calls(requests, existing), lexicon_timeouts=timeouts)


def _selected(rows: list[Any], selection: Selection) -> list[Any]:
    """The rows a selection picks (ValidationError when it names an item not the job's)."""
    if selection.items is None:
        return [r for r in rows if r.stale]
    wanted = set(selection.items)
    if not wanted <= {r.id for r in rows}:
        raise ValidationError("items names an item that is not one of this job's", field="items")
    return [r for r in rows if r.id in wanted]


def price(settings: Settings, characters: int) -> dict[str, Any] | None:
    """What ``characters`` cost at the configured price, or None without one."""
    per_million = settings.tts_price_per_million_characters
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
    now: calls, characters, reuse, price, and the items a lexicon rule runs out of time
    on (``lexicon_timeouts``: a run would end them ERROR without a call)."""
    with uow_factory(read_only=True) as uow:
        plan = _plan(
            uow.spending, provider, user, job_id, regenerate=regenerate, selection=selection,
            lexicon=compiled_lexicon(uow.lexicon, user.organization_id),
        )  # fmt: skip
    return {
        "items": plan.calls,
        "characters": plan.characters,
        "reused_items": plan.reused_items,
        "lexicon_timeouts": plan.lexicon_timeouts,
        "price": price(settings, plan.characters),
    }


def check_budget(
    spending: Spending,
    provider: TTSProvider,
    user: UserRecord,
    job_id: int,
    *,
    regenerate: bool,
    lexicon: Lexicon | None = None,
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
    plan = _plan(spending, provider, user, job_id, regenerate=regenerate, lexicon=lexicon)
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
    return {
        "month": usage.month,
        "billed_characters": usage.billed_characters,
        "provider_calls": usage.provider_calls,
        "budget_characters": usage.budget_characters,
        "remaining_characters": usage.remaining_characters,
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


def collect_garbage(
    uow_factory: UowFactory, storage: Storage, *, min_age_seconds: float = GC_MIN_AGE_SECONDS
) -> list[str]:
    """Delete stored files that no item and no export refers to, older than ``min_age``.

    Temporary files and unfinished multipart uploads (of writes a killed process never
    finished) go too. Returns the keys it deleted (uploads as ``KEY (unfinished upload)``).
    """
    aborted = storage.abort_uploads_older_than(min_age_seconds)
    keys = list(storage.keys_older_than(min_age_seconds))
    temporary = [k for k in keys if PurePosixPath(k).name.startswith(TEMP_PREFIX)]
    others = [k for k in keys if not PurePosixPath(k).name.startswith(TEMP_PREFIX)]
    with uow_factory(read_only=True) as uow:
        referenced = uow.spending.referenced_keys(others)
    deleted = temporary + [k for k in others if k not in referenced]
    for key in deleted:
        storage.delete(key)
    log.info("gc deleted %s file(s) and %s unfinished upload(s)", len(deleted), len(aborted))
    return sorted(deleted + aborted)
