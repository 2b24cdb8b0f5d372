"""Seeded random schedules of faults against the app's operations.

A schedule is a list of steps; each step starts one operation (a run, a cancel, a
regenerate, a render, an export) and injects one fault a moment later. The same seed gives
the same schedule, printed with the seed when a step fails, so that ``FAULT_SEEDS=N``
replays it (the timing of the processes still varies from run to run).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

OPERATIONS = ("run", "run", "cancel", "regenerate", "render", "export")
# items_refused: the runner's item writes fail (their connections reset) for longer than
# DB_RETRY_SECONDS while every other query goes through: a lane fails in a living process.
DATABASE_FAULTS = ("black_hole", "stall", "reset_all", "lost_acks", "items_refused")
PROVIDER_FAULTS = ("storm", "hang", "refuse", "provider_reset")
FAULTS = (*DATABASE_FAULTS, *PROVIDER_FAULTS, "none")
STEPS = 8
# The seeds CI runs, with how many of their steps (a full seed takes about a minute on the
# 2-core machine). On the code before the runner's rework (22fe099) each finds one of the
# bugs this suite was built for (docs/benchmarks.md, "on the old code"): 1 a run wedged
# GENERATING in a living process (step 1), 2 more calls in flight than slots (step 2),
# 16 refused connections billed (step 1), 31 a cancel that deleted a DONE item's audio
# (step 2), 49 a render whose lost acknowledgement deleted its published file (step 2).
CI_SEEDS = ((1, STEPS), (2, STEPS), (16, 2), (31, 2), (49, 2))


@dataclass(frozen=True)
class Step:
    """One operation and the fault injected ``delay`` seconds after it started."""

    operation: str
    fault: str
    delay: float
    size: int  # the fault's size: seconds of a hole or a storm, acknowledgements lost...
    items: int  # items of a new job

    def describe(self) -> str:
        """One line: what was done and what was injected when."""
        return (
            f"{self.operation} ({self.items} items) + {self.fault}"
            f"[{self.size}] at {self.delay:.2f}s"
        )


def fault_size(rng: random.Random, fault: str) -> int:
    """How big ``fault`` is: seconds (holes, storms, hangs, refusals) or a count."""
    if fault == "black_hole":
        return rng.randint(3, 5)  # longer than DB_RETRY_SECONDS
    if fault == "items_refused":
        # Longer than DB_RETRY_SECONDS plus the retries' last pause, so that a lane whose
        # write was refused early in the window gives up while the window is still on.
        return rng.randint(5, 7)
    if fault == "lost_acks":
        return rng.randint(1, 4)
    if fault == "provider_reset":
        return rng.randint(1, 3)
    if fault in ("stall", "storm", "hang", "refuse"):
        return rng.randint(1, 3)
    return 0


def _deck(rng: random.Random, cards: tuple[str, ...], n: int) -> list[str]:
    """``n`` draws that go through every card (shuffled) before any repeats."""
    drawn: list[str] = []
    while len(drawn) < n:
        deck = list(cards)
        rng.shuffle(deck)
        drawn += deck
    return drawn[:n]


def make_schedule(seed: int, steps: int = STEPS) -> list[Step]:
    """The schedule of ``seed``: ``steps`` steps, the first one a run (to have a job);
    every operation and every fault comes once before any comes twice. Fewer than
    ``STEPS`` steps are the first steps of the seed's whole schedule."""
    return _whole_schedule(seed, max(steps, STEPS))[:steps]


def _whole_schedule(seed: int, steps: int) -> list[Step]:
    rng = random.Random(seed)
    operations = ["run", *_deck(rng, OPERATIONS, steps - 1)]
    faults = _deck(rng, FAULTS, steps)
    schedule = []
    for operation, fault in zip(operations, faults, strict=True):
        schedule.append(
            Step(
                operation=operation,
                fault=fault,
                # Early in a run of 6-12 items (2 slots, 0.15 s calls: about 1 s), so
                # that the fault, and a cancel, hit calls and commits in flight.
                delay=round(rng.uniform(0.0, 0.6), 2),
                size=fault_size(rng, fault),
                items=rng.randint(6, 12),
            )
        )
    return schedule


def describe(seed: int, schedule: list[Step]) -> str:
    """The seed and its schedule, to be printed when a step fails."""
    lines = [f"FAULT_SEEDS={seed}:{len(schedule)} replays this schedule:"]
    lines += [f"  {n + 1}. {step.describe()}" for n, step in enumerate(schedule)]
    return "\n".join(lines)


def seeds_to_run() -> list[tuple[int, int]]:
    """(seed, steps) of ``FAULT_SEEDS`` (comma-separated ``SEED`` or ``SEED:STEPS``), or
    the fixed seeds CI runs."""
    value = os.environ.get("FAULT_SEEDS", "").strip()
    if not value:
        return list(CI_SEEDS)
    seeds = []
    for part in filter(None, (p.strip() for p in value.split(","))):
        seed, _, steps = part.partition(":")
        seeds.append((int(seed), int(steps or STEPS)))
    return seeds
