"""A run's lanes: ITEM_CONCURRENCY in all, each at home with a provider, every provider with
groups given one while there are lanes enough, and a lane with an empty queue helping the
others (so the calls in flight for a job stay within ITEM_CONCURRENCY, whatever its cast)."""

from __future__ import annotations

import queue

from speechbatch.runner.plan import Group, ProviderWork, lanes, next_group


def _work(provider: str, groups: int) -> ProviderWork:
    work: queue.SimpleQueue[Group] = queue.SimpleQueue()
    for n in range(groups):
        work.put(Group(f"{provider}{n}", [(n, "x")]))
    return ProviderWork(provider, work, max(1, groups))


def _homes(by_provider: list[ProviderWork], concurrency: int) -> list[str]:
    return [queues[0][0] for queues in lanes(by_provider, concurrency)]


def test_one_provider_has_as_many_lanes_as_the_concurrency_or_its_groups() -> None:
    assert _homes([_work("openai", 10)], 4) == ["openai"] * 4
    assert _homes([_work("openai", 2)], 4) == ["openai"] * 2
    assert _homes([_work("openai", 0)], 4) == ["openai"]  # an empty run ends through a lane


def test_lanes_are_shared_out_in_turn_and_never_exceed_the_concurrency() -> None:
    cast = [_work("piper", 1), _work("elevenlabs", 3), _work("google", 6)]
    assert _homes(cast, 4) == ["google", "elevenlabs", "piper", "google"]
    assert _homes(cast, 2) == ["google", "elevenlabs"]
    assert _homes(cast, 1) == ["google"]
    assert len(_homes(cast, 16)) == 10  # a lane a group at the most


def test_a_lane_takes_its_own_providers_groups_first_then_the_others() -> None:
    cast = [_work("piper", 1), _work("elevenlabs", 3), _work("google", 2)]
    *_, piper = lanes(cast, 3)
    taken = []
    while (group := next_group(piper)) is not None:
        taken.append(group.fingerprint)
    assert taken == ["piper0", "elevenlabs0", "elevenlabs1", "elevenlabs2", "google0", "google1"]
