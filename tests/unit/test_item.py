"""An item's start and finish against fakes (no I/O): every transition the runner makes."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import pytest

from speechbatch.adapters.repositories.items import FinishedItem, StartedItem
from speechbatch.adapters.repositories.ledger import Reservation, Usage
from speechbatch.adapters.repositories.slots import SlotGrant
from speechbatch.config import Settings
from speechbatch.errors import Fenced
from speechbatch.runner.call import Calls
from speechbatch.runner.gate import ProviderGate
from speechbatch.runner.item import Items, Run, Started

T = TypeVar("T")
JOB, ATTEMPT, ORG = 1, 1, 1


@dataclass
class World:
    """The database, as far as an item's transactions see it."""

    fenced: bool = False
    statuses: dict[int, str] = field(default_factory=dict)
    texts: dict[int, str] = field(default_factory=dict)
    audio: dict[int, str | None] = field(default_factory=dict)
    fingerprints: dict[int, str] = field(default_factory=dict)
    budget: int | None = None
    billed: int = 0
    reservations: dict[int, int] = field(default_factory=dict)  # id -> characters, live
    free_slots: int = 1
    held: dict[int, int] = field(default_factory=dict)  # slot -> token
    tokens: int = 0
    stamps: int = 0


class FakeRuns:
    def __init__(self, world: World) -> None:
        self.w = world

    def stamp_job_progress(self, job_id: int, attempt: int) -> bool:
        self.w.stamps += 1
        return not self.w.fenced

    def start_item(
        self, job_id: int, attempt: int, item_id: int, *, reuse_fingerprint: str | None = None
    ) -> StartedItem | None:
        if self.w.fenced or self.w.statuses.get(item_id) not in ("PENDING", "ERROR"):
            return None
        self.w.statuses[item_id] = "GENERATING"
        source = next(
            (
                other
                for other, fp in self.w.fingerprints.items()
                if fp == reuse_fingerprint and self.w.statuses[other] == "DONE"
            ),
            None,
        )
        return StartedItem(self.w.texts[item_id], self.w.audio.get(item_id), source)

    def reuse_audio(
        self,
        job_id: int,
        attempt: int,
        item_id: int,
        source_item_id: int,
        fingerprint: str,
        **kw: Any,
    ) -> FinishedItem:
        if self.w.fenced:
            return FinishedItem(won=False)
        self.w.statuses[item_id] = "DONE"
        self.w.audio[item_id] = self.w.audio[source_item_id]
        return FinishedItem(won=True)

    def finish_item(
        self, job_id: int, attempt: int, item_id: int, **kw: Any
    ) -> FinishedItem:  # fmt: skip
        if self.w.fenced or self.w.statuses[item_id] != "GENERATING":
            return FinishedItem(won=False)
        if kw.get("error_message") is not None:
            self.w.statuses[item_id] = "ERROR"
            return FinishedItem(won=True)
        self.w.statuses[item_id] = "DONE"
        replaced, self.w.audio[item_id] = self.w.audio.get(item_id), kw["audio_path"]
        return FinishedItem(won=True, orphaned_audio_paths=(replaced,) if replaced else ())

    def return_item(self, job_id: int, attempt: int, item_id: int) -> bool:
        if self.w.fenced:
            return False
        self.w.statuses[item_id] = "PENDING"
        return True


class FakeSpending:
    def __init__(self, world: World) -> None:
        self.w = world

    def reserve_characters(
        self, organization_id: int, job_id: int, attempt: int, characters: int
    ) -> Reservation | None:
        if self.w.budget is not None and self.w.billed + characters > self.w.budget:
            return None
        self.w.billed += characters
        reservation_id = len(self.w.reservations) + 1
        self.w.reservations[reservation_id] = characters
        return Reservation(reservation_id, job_id, characters, "2026-12")

    def refund_reservation(self, reservation: Reservation) -> bool:
        characters = self.w.reservations.pop(reservation.id, None)
        if characters is None:
            return False
        self.w.billed -= characters
        return True

    def usage(self, organization_id: int) -> Usage:
        return Usage("2026-12", self.w.billed, len(self.w.reservations), self.w.budget)


class FakeSlots:
    def __init__(self, world: World) -> None:
        self.w = world

    def acquire_slot(self, worker_id: int, job_id: int, attempt: int, **kw: Any) -> Any:
        if self.w.fenced or self.w.free_slots <= 0:
            return None
        self.w.free_slots -= 1
        self.w.tokens += 1
        slot = max(self.w.held, default=-1) + 1
        self.w.held[slot] = self.w.tokens
        return SlotGrant(slot, self.w.tokens)

    def holds_its_share(self, job_id: int, **kw: Any) -> bool:
        return False

    def paused_for(self) -> float:
        return 0.0

    def release_slot(self, grant: SlotGrant, job_id: int | None = None) -> bool:
        if self.w.held.get(grant.slot) != grant.token:
            return False
        del self.w.held[grant.slot]
        self.w.free_slots += 1
        return True

    def count_waiting(self, job_id: int, attempt: int, reason: str, delta: int) -> None:
        pass


class FakeUow:
    def __init__(self, world: World) -> None:
        self.runs = FakeRuns(world)
        self.spending = FakeSpending(world)
        self.slots = FakeSlots(world)

    def __enter__(self) -> FakeUow:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class FakeTx:
    """One transaction: ``work`` against the world, all or nothing."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.lock = threading.Lock()

    def __call__(self, work: Callable[[Any], T]) -> T:
        with self.lock:
            before = copy.deepcopy(self.world.__dict__)
            try:
                return work(FakeUow(self.world))
            except BaseException:
                self.world.__dict__.update(before)
                raise

    def uow_factory(self, read_only: bool = False) -> FakeUow:
        return FakeUow(self.world)


class FakeStorage:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def write(self, key: str, data: bytes) -> None:
        self.files[key] = data

    def delete(self, key: str) -> None:
        self.files.pop(key, None)


class FakeProvider:
    file_extension = "mp3"


def _items(world: World, *, draining: Callable[[], bool] = lambda: False) -> Items:
    settings = Settings(worker_dead_seconds=60.0)
    tx = FakeTx(world)
    gate = ProviderGate(lambda work: tx(lambda uow: work(uow.slots)), settings, lambda: 1)
    return Items(
        cast(Any, tx), gate, cast(Any, FakeProvider()), cast(Any, FakeStorage()), settings, draining
    )


def _world(*texts: str, **kw: Any) -> World:
    world = World(**kw)
    for n, text in enumerate(texts, start=1):
        world.statuses[n], world.texts[n] = "PENDING", text
    return world


def _run() -> Run:
    return Run(JOB, ATTEMPT, voice="alloy", organization_id=ORG)


def test_start_makes_the_item_generating_with_a_reservation_and_a_slot() -> None:
    world = _world("hello")
    started = _items(world).start(_run(), 1, "hello", "fp")
    assert started is not None and started.reused_from is None
    assert started.reservation is not None and started.slot is not None
    assert world.statuses[1] == "GENERATING"
    assert world.billed == 5 and world.free_slots == 0


def test_start_reuses_finished_audio_without_a_call_slot_or_reservation() -> None:
    world = _world("hello", "hello")
    world.statuses[1], world.audio[1], world.fingerprints[1] = "DONE", "a.mp3", "fp"
    started = _items(world).start(_run(), 2, "hello", "fp")
    assert started is not None and started.reused_from == 1
    assert started.reservation is None and started.slot is None
    assert world.statuses[2] == "DONE" and world.audio[2] == "a.mp3"
    assert world.billed == 0 and world.free_slots == 1


def test_start_of_a_fenced_run_raises_fenced_and_writes_nothing() -> None:
    world = _world("hello", fenced=True)
    run = _run()
    with pytest.raises(Fenced):
        _items(world).start(run, 1, "hello", "fp")
    assert run.fenced.is_set()
    assert world.statuses[1] == "PENDING" and world.billed == 0


def test_start_over_budget_leaves_the_item_pending_and_stops_the_run() -> None:
    world = _world("hello", budget=3)
    run = _run()
    assert _items(world).start(run, 1, "hello", "fp") is None
    assert run.over_budget is not None and "over budget" in run.over_budget
    assert world.statuses[1] == "PENDING" and world.billed == 0


def test_start_without_a_free_slot_rolls_back_waits_and_starts_when_one_is_released() -> None:
    world = _world("hello", free_slots=0)
    items = _items(world)
    answers: list[Started | None] = []
    thread = threading.Thread(target=lambda: answers.append(items.start(_run(), 1, "hello", "x")))
    thread.start()
    thread.join(0.1)
    assert thread.is_alive() and answers == []
    assert world.statuses[1] == "PENDING" and world.billed == 0  # rolled back
    with items.tx.lock:  # type: ignore[attr-defined]
        world.free_slots = 1
    items.gate.released(99)
    thread.join(2)
    assert answers and answers[0] is not None and answers[0].slot is not None
    assert world.statuses[1] == "GENERATING"


def test_start_without_a_free_slot_gives_up_when_the_process_drains() -> None:
    world = _world("hello", free_slots=0)
    run = _run()
    assert _items(world, draining=lambda: True).start(run, 1, "hello", "fp") is None
    assert run.left_items and world.statuses[1] == "PENDING"


def _started(world: World, items: Items, run: Run) -> Started:
    started = items.start(run, 1, world.texts[1], "fp")
    assert started is not None
    return started


def test_finish_done_stores_the_audio_and_keeps_the_reservation() -> None:
    world = _world("hello")
    world.audio[1] = "old.mp3"
    items, run = _items(world), _run()
    storage = cast(FakeStorage, items.storage)
    storage.files["old.mp3"] = b"old"
    assert items.finish(run, _started(world, items, run), b"audio", None)
    assert world.statuses[1] == "DONE"
    assert storage.files == {"jobs/1/1-a1.mp3": b"audio"}  # the replaced file deleted
    assert world.billed == 5  # sent: the reservation is kept


def test_finish_error_marks_the_item() -> None:
    world = _world("hello")
    items, run = _items(world), _run()
    assert not items.finish(run, _started(world, items, run), None, "provider said no")
    assert world.statuses[1] == "ERROR"


def test_finish_of_a_fenced_run_deletes_its_audio() -> None:
    world = _world("hello")
    items, run = _items(world), _run()
    started = _started(world, items, run)
    world.fenced = True
    with pytest.raises(Fenced):
        items.finish(run, started, b"audio", None)
    assert cast(FakeStorage, items.storage).files == {}
    assert world.statuses[1] == "GENERATING"


class SpeakingProvider(FakeProvider):
    """Answers every call, noting how many slots were free while it was in flight."""

    name, voices, max_chars, content_type = "fake", ("alloy",), 4096, "audio/mpeg"

    def __init__(self, world: World) -> None:
        self.world = world
        self.free_during_calls: list[int] = []

    def synthesize(self, text: str, voice: str, options: Any = None) -> bytes:
        self.free_during_calls.append(self.world.free_slots)
        return b"audio"


def test_a_calls_slot_goes_back_as_soon_as_its_answer_came() -> None:
    """The slot is held during the call only, not while the audio is measured and
    stored: another item may start its call meanwhile."""
    world = _world("hello")
    items, run = _items(world), _run()
    provider = SpeakingProvider(world)
    items.provider = cast(Any, provider)
    started = _started(world, items, run)
    sent = Calls(items).send(run, started)
    assert sent == (b"audio", None) and provider.free_during_calls == [0]
    assert world.free_slots == 1 and started.slot is None and world.billed == 5
    assert items.finish(run, started, b"audio", None) and world.free_slots == 1


def test_an_attempt_not_sent_gives_back_its_reservation_once() -> None:
    world = _world("hello")
    items, run = _items(world), _run()
    started = _started(world, items, run)
    kept = copy.copy(started)
    items.give_back(run, started)
    items.give_back(run, kept)  # a retried give-back: the reservation is flipped already
    assert world.billed == 0 and world.free_slots == 1
