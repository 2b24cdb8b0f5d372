"""The impact pass with fakes: chunks read from the cursor the last one wrote, lines and
distinct jobs counted exactly across chunks, a turn that gives its lease back after its
slice and goes on later, a lost grant that stops a turn, a lost claim that does not stop
the others, rules that cannot be used."""

from __future__ import annotations

import pytest

from speechbatch.adapters.repositories.impacts import (
    DONE,
    FAILED,
    PENDING,
    RUNNING,
    ImpactClaim,
    ImpactProgress,
    ImpactState,
)
from speechbatch.adapters.repositories.stale_marks import DoneItem
from speechbatch.domain.lexicon import Lexicon, Rule
from speechbatch.runner import impact_pass
from speechbatch.services.lexicon_impact import canonical
from tests.fakes import FakeRepository, FakeUnitOfWork, FakeUowFactory

ORG = 7
RULES = [Rule("SQL", "sequel")]


class FakeImpacts:
    """One stored dry run over DONE items in memory (the Impacts Protocol, no SQL)."""

    def __init__(self, items: list[DoneItem], rules: str) -> None:
        self.items = sorted(items, key=lambda i: (i.job_id, i.position))
        self.rules = rules
        self.status = PENDING
        self.progress = ImpactProgress()
        self.token = 0
        self.leased = False
        self.reads: list[tuple[int, int]] = []

    def create_impact(self, organization_id: int, rules: str, lexicon_version: int) -> int:
        raise NotImplementedError

    def impact(self, organization_id: int, impact_id: int) -> ImpactState | None:
        return ImpactState(1, ORG, self.rules, 0, self.status, self.progress)

    def finished_impact(
        self, organization_id: int, rules: str, lexicon_version: int
    ) -> ImpactState | None:
        return None

    def impact_due(self) -> bool:
        return self.status in (PENDING, RUNNING) and not self.leased

    def claim_impact(self, lease_seconds: float) -> ImpactClaim | None:
        if not self.impact_due():
            return None
        self.token, self.leased, self.status = self.token + 1, True, RUNNING
        return ImpactClaim(1, ORG, self.token)

    def count_done_items(self, organization_id: int) -> int:
        return len(self.items)

    def done_items_after(
        self, organization_id: int, after_job: int, after_position: int, limit: int
    ) -> list[DoneItem]:
        self.reads.append((after_job, after_position))
        after = [i for i in self.items if (i.job_id, i.position) > (after_job, after_position)]
        return after[:limit]

    def advance_impact(
        self, claim: ImpactClaim, progress: ImpactProgress, lease_seconds: float, finished: bool
    ) -> bool:
        if claim.token != self.token or self.status != RUNNING:
            return False
        self.progress = progress
        if finished:
            self.status, self.leased = DONE, False
        return True

    def fail_impact(self, claim: ImpactClaim) -> bool:
        if claim.token != self.token or self.status != RUNNING:
            return False
        self.status, self.leased = FAILED, False
        return True

    def release_impact(self, claim: ImpactClaim) -> None:
        if claim.token == self.token:
            self.leased = False

    def delete_old_impacts(self, seconds: float) -> int:
        return 0


def item(job: int, position: int, text: str, stale: bool = False) -> DoneItem:
    return DoneItem(job * 100 + position, job, position, text, stale, text, False)


# Jobs 1 to 4: job 2 has no line the rule changes, job 3's only one is stale already.
ITEMS = [
    item(1, 0, "SQL one."), item(1, 1, "plain"), item(1, 2, "More SQL."),
    item(2, 0, "plain"), item(2, 1, "plain"),
    item(3, 0, "SQL but stale", stale=True), item(3, 1, "plain"),
    item(4, 0, "plain"), item(4, 1, "plain"), item(4, 2, "SQL at last."),
]  # fmt: skip


def setup(items: list[DoneItem], rules: str) -> tuple[FakeImpacts, FakeUowFactory]:
    impacts = FakeImpacts(items, rules)
    uow = FakeUnitOfWork(FakeRepository())
    uow.impacts = impacts
    return impacts, FakeUowFactory(uow)


def test_chunks_read_from_the_cursor_and_count_each_job_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(impact_pass, "CHUNK", 3)
    impacts, factory = setup(ITEMS, canonical(RULES))
    assert impact_pass.run_due_impacts(factory, 4096) == 1
    assert impacts.status == DONE and not impacts.leased
    assert impacts.progress == ImpactProgress(4, 2, 4, 3, 2, 10, 10)
    # Each chunk starts after the last row the one before it read.
    assert impacts.reads == [(0, -1), (1, 2), (3, 0), (4, 1)]


def test_a_turn_gives_its_lease_back_after_its_slice_and_goes_on_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(impact_pass, "CHUNK", 4)
    monkeypatch.setattr(impact_pass, "SLICE_SECONDS", -1.0)  # a turn's least: one row
    impacts, factory = setup(ITEMS, canonical(RULES))
    assert impact_pass.run_due_impacts(factory, 4096, most=1) == 0
    assert impacts.status == RUNNING and not impacts.leased
    assert impacts.progress == ImpactProgress(1, 0, 1, 1, 1, 1, 10)
    assert impact_pass.run_due_impacts(factory, 4096) == 1
    assert impacts.reads[:3] == [(0, -1), (1, 0), (1, 1)]  # a turn each, from the cursor
    assert (impacts.progress.lines, impacts.progress.jobs, impacts.progress.checked) == (3, 2, 10)


def test_a_lost_grant_stops_the_turn_and_writes_nothing() -> None:
    impacts, factory = setup(ITEMS, canonical(RULES))
    claim = impacts.claim_impact(30)
    assert claim is not None
    impacts.token += 1  # another process claimed it after this lease ran out
    outcome = impact_pass.impact_pass(factory, claim, 4096, until=9e18)
    assert outcome is impact_pass.Outcome.LOST and impacts.progress == ImpactProgress()


def test_a_chunk_counts_one_row_at_least_then_stops_at_its_deadline() -> None:
    lexicon = Lexicon.compile(RULES, limit=4096)
    after = impact_pass.count(ITEMS, lexicon, ImpactProgress(), deadline=-1.0)
    assert after == ImpactProgress(1, 0, 1, 1, 1, 1, None)
    # A job counted in the chunk before is not counted again.
    again = impact_pass.count(ITEMS[2:3], lexicon, after, deadline=9e18)
    assert (again.lines, again.jobs, again.counted_job) == (2, 1, 1)


def test_rules_that_cannot_be_used_end_the_request_failed() -> None:
    impacts, factory = setup(ITEMS, '[{"match": "(", "say": "x", "regex": true}]')
    assert impact_pass.run_due_impacts(factory, 4096) == 1
    assert impacts.status == FAILED and impacts.reads == []


def test_a_claim_lost_to_another_process_goes_on_to_the_next_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    impacts, factory = setup(ITEMS, canonical(RULES))
    claim, tries = impacts.claim_impact, [0]

    def lost_once(lease_seconds: float) -> ImpactClaim | None:
        tries[0] += 1  # the first was won by another process after it looked due
        return None if tries[0] == 1 else claim(lease_seconds)

    monkeypatch.setattr(impacts, "claim_impact", lost_once)
    assert impact_pass.run_due_impacts(factory, 4096) == 1
    assert impacts.status == DONE and tries == [2]


def test_claims_always_lost_stop_after_the_most_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    impacts, factory = setup(ITEMS, canonical(RULES))
    tries = [0]

    def lost(lease_seconds: float) -> ImpactClaim | None:
        tries[0] += 1
        return None

    monkeypatch.setattr(impacts, "claim_impact", lost)
    assert impact_pass.run_due_impacts(factory, 4096, most=5) == 0
    assert tries == [5] and impacts.status == PENDING
