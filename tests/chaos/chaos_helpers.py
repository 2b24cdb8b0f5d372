"""What the chaos tests share beyond the harness: texts no other run uses and tags unique
across sessions (so the fake's per-text counters tell items apart), the bound on the
retries after a fault, and an AssertionError that carries the servers' log tails.
"""

from __future__ import annotations

import random
import uuid

from tests.support.server import GunicornServer

MAX_RETRIES = 3
WORDS = (
    "amber", "basalt", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo",
    "juniper", "kelp", "lagoon", "meadow", "nickel", "onyx", "pumice", "quartz", "river",
    "sierra", "tundra", "umber", "violet", "willow", "xenon", "yarrow",
)  # fmt: skip


def unique_texts(rng: random.Random, tag: str, n: int) -> list[str]:
    """Texts no other run uses, so the fake's per-text counters tell items apart."""
    return [
        f"{tag} item {k:02d}: {rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(WORDS)}."
        for k in range(n)
    ]


def new_tag(prefix: str) -> str:
    """A tag unique across sessions that share the fake (one fake per test anyway)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def with_log(exc: BaseException, *servers: GunicornServer | None) -> AssertionError:
    """An AssertionError carrying the servers' log tails."""
    logs = "".join(
        f"\n--- log of {s.name} (tail) ---\n{s.log_text(6000)}" for s in servers if s is not None
    )
    return AssertionError(f"{exc}{logs}")
