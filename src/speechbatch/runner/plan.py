"""A run's plan: its items grouped by fingerprint, and the groups queued by provider.

Items that ask the provider the same thing are one group: sent once, their duplicates
share the audio. Each provider a run's lines are spoken by (its speaker's voice in the
cast, else the job's) gets its own queue of groups. The run has ITEM_CONCURRENCY lanes
(threads) in all, each at home with one provider, so a slow provider's lines, waiting for
its slots, never leave another provider's lines without a lane; a lane whose own queue is
empty helps with the others'.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import NamedTuple

from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.providers.registry import resolve
from speechbatch.adapters.repositories.runs import RunPlan
from speechbatch.adapters.uow import RunUnit
from speechbatch.domain.editing import parse_options
from speechbatch.domain.fingerprints import fingerprinter
from speechbatch.domain.lexicon import Lexicon, Unspeakable
from speechbatch.runner.attempt import Run
from speechbatch.runner.steps import Steps
from speechbatch.services.lexicon import compiled_lexicon


@dataclass
class Group:
    """Items of one run that ask the provider the same thing: sent once, then shared."""

    fingerprint: str
    # (item id, spoken text): computed once, here; the start sends and bills it.
    items: list[tuple[int, str]]
    # The voice they are spoken with (the fingerprint includes it).
    voice: str = ""
    # An item whose spoken text would be too long: it ends ERROR with this message, unsent.
    error: str | None = None


class ProviderWork(NamedTuple):
    """One provider's share of a run: its groups, queued for its lanes (threads) to take."""

    provider: str
    work: queue.SimpleQueue[Group]
    # How many groups it was given (at least one: an empty run still ends through a lane).
    groups: int


def read_plan(uow: RunUnit, run: Run, max_chars: int) -> tuple[RunPlan, Lexicon]:
    """The run's plan and its organization's rules (for items of at most ``max_chars``),
    read once in one transaction (the rules are cached per version: no statement per
    item for them)."""
    plan = uow.runs.run_plan(run.job_id, run.attempt)
    return plan, compiled_lexicon(uow.lexicon, plan.organization_id, max_chars)


def take_plan(run: Run, plan: RunPlan, provider: TTSProvider) -> None:
    """What the run keeps of its plan: its voice's provider (one of several) and the
    voice's name there, its organization, whether it regenerates, its options."""
    run.provider, run.voice = resolve(provider, plan.voice)
    run.organization_id = plan.organization_id
    run.regenerate, run.options = plan.regenerate, parse_options(plan.options)


def group_items(provider: TTSProvider, run: Run, items: list[tuple[int, str, str]]) -> list[Group]:
    """The run's items grouped by fingerprint (of their spoken text, with the rules the
    run began with, and their voice: their speaker's or the job's), in the order of each
    group's first item; an item the rules cannot make a spoken text of within bounds (too
    long) is a group of its own, first, to be ended ERROR: it is never sent nor billed."""
    fingerprint = fingerprinter(provider)
    groups: dict[str, Group] = {}
    unspeakable: list[Group] = []
    for item_id, text, voice in items:
        try:
            spoken = run.lexicon.spoken(text)
        except Unspeakable as exc:
            unspeakable.append(Group("", [(item_id, text)], error=str(exc)))
            continue
        fp = fingerprint(run.organization_id, voice, spoken, run.options)
        groups.setdefault(fp, Group(fp, [], voice)).items.append((item_id, spoken))
    return unspeakable + list(groups.values())


def work_of(steps: Steps, run: Run, items: list[tuple[int, str, str]]) -> list[ProviderWork]:
    """The run's groups queued by the provider of their voice, each in order; the run's
    own provider first (the unspeakable items, which send nothing, are its)."""
    own = steps.provider_of(run)
    by_provider: dict[str, list[Group]] = {own.name: []}
    for group in group_items(own, run, items):
        name = own.name if group.error is not None else steps.speaker(run, group.voice)[0].name
        by_provider.setdefault(name, []).append(group)
    return [ProviderWork(name, _queued(gs), max(1, len(gs))) for name, gs in by_provider.items()]


def _queued(groups: list[Group]) -> queue.SimpleQueue[Group]:
    work: queue.SimpleQueue[Group] = queue.SimpleQueue()
    for group in groups:
        work.put(group)
    return work


def lanes(
    by_provider: list[ProviderWork], concurrency: int
) -> list[list[tuple[str, queue.SimpleQueue[Group]]]]:
    """The run's lanes, each as the queues it takes from in order: its own provider's,
    then the others' (most groups first). ``concurrency`` lanes in all (fewer when there
    are fewer groups, one at least), given in turn to the providers with the most groups
    first, so each has its own while there are lanes enough; the calls in flight for the
    job stay within ``concurrency``."""
    ranked = sorted(by_provider, key=lambda p: -p.groups)
    queues = [(p.provider, p.work) for p in ranked]
    total = max(1, min(concurrency, sum(p.groups for p in ranked)))
    homes: list[int] = []
    while len(homes) < total:
        # Round after round, one lane each to the providers that still have groups for it.
        added = [n for n, p in enumerate(ranked) if homes.count(n) < p.groups]
        homes.extend(added[: total - len(homes)] or [0])
    return [[queues[home], *(q for n, q in enumerate(queues) if n != home)] for home in homes]


def next_group(queues: list[tuple[str, queue.SimpleQueue[Group]]]) -> Group | None:
    """The next group from the first of ``queues`` that has one; None when all are empty."""
    for _, work in queues:
        try:
            return work.get_nowait()
        except queue.Empty:
            continue
    return None
