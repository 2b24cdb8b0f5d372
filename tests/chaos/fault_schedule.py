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
DATABASE_FAULTS = ("black_hole", "stall", "reset_all", "lost_acks")
PROVIDER_FAULTS = ("storm", "hang", "refuse", "provider_reset")
FAULTS = (*DATABASE_FAULTS, *PROVIDER_FAULTS, "none")
# The seeds CI runs (about a minute each on the 2-core machine).
CI_SEEDS = (1, 2)
STEPS = 8


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
    every operation and every fault comes once before any comes twice."""
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
    lines = [f"FAULT_SEEDS={seed} replays this schedule:"]
    lines += [f"  {n + 1}. {step.describe()}" for n, step in enumerate(schedule)]
    return "\n".join(lines)


def seeds_to_run() -> list[int]:
    """``FAULT_SEEDS`` (comma-separated) or the fixed seeds CI runs."""
    value = os.environ.get("FAULT_SEEDS", "").strip()
    if not value:
        return list(CI_SEEDS)
    return [int(part) for part in value.split(",") if part.strip()]
