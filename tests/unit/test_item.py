"""An item's pipeline against fakes (no I/O): every step's transitions, and the hold of
an attempt's slot and reservation."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from speechbatch.adapters.providers.base import CharacterBilled, Delivery, RetryableProviderError
from speechbatch.adapters.providers.registry import ProviderSet
from speechbatch.adapters.repositories.items import FinishedItem, StartedItem
from speechbatch.adapters.repositories.ledger import Reservation, Usage
from speechbatch.adapters.repositories.slots import SlotGrant
from speechbatch.config import Settings
from speechbatch.runner.attempt import Attempt, Outcome, Run
from speechbatch.runner.begin import begin
from speechbatch.runner.finish import finish
from speechbatch.runner.gate import Lane, ProviderGate
from speechbatch.runner.hold import holding
from speechbatch.runner.item import run_item
from speechbatch.runner.send import send
from speechbatch.runner.steps import Steps
from speechbatch.runner.transactions import Rollback

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
    in_doubt: int = 0  # characters counted as in doubt
    slots_from: list[int] = field(default_factory=list)  # the first slot of each take's lane
    billed_to: list[str | None] = field(default_factory=list)  # each reservation's provider


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
        self,
        organization_id: int,
        job_id: int,
        attempt: int,
        characters: int,
        provider: str | None = None,
    ) -> Reservation | None:
        if self.w.budget is not None and self.w.billed + characters > self.w.budget:
            return None
        self.w.billed += characters
        self.w.billed_to.append(provider)
        reservation_id = len(self.w.reservations) + 1
        self.w.reservations[reservation_id] = characters
        return Reservation(reservation_id, job_id, characters, "2026-12")

    def refund_reservation(self, reservation: Reservation) -> bool:
        characters = self.w.reservations.pop(reservation.id, None)
        if characters is None:
            return False
        self.w.billed -= characters
        return True

    def mark_in_doubt(self, reservation: Reservation) -> bool:
        self.w.in_doubt += reservation.characters
        return True

    def referenced_keys(self, keys: Any) -> set[str]:
        return {key for key in keys if key in self.w.audio.values()}

    def usage(self, organization_id: int) -> Usage:
        return Usage("2026-12", self.w.billed, len(self.w.reservations), self.w.budget)


class FakeSlots:
    def __init__(self, world: World) -> None:
        self.w = world

    def acquire_slot(self, worker_id: int, job_id: int, attempt: int, **kw: Any) -> Any:
        self.w.slots_from.append(kw.get("first", 0))
        if self.w.fenced or self.w.free_slots <= 0:
            return None
        self.w.free_slots -= 1
        self.w.tokens += 1
        slot = max(self.w.held, default=-1) + 1
        self.w.held[slot] = self.w.tokens
        return SlotGrant(slot, self.w.tokens)

    def holds_its_share(self, job_id: int, **kw: Any) -> bool:
        return False

    def paused_for(self, row: int = 1) -> float:
        return 0.0

    def renew_slot(self, grant: SlotGrant) -> bool:
        return self.w.held.get(grant.slot) == grant.token

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

    def __call__(self, work: Callable[[Any], Any]) -> Any:
        with self.lock:
            before = copy.deepcopy(self.world.__dict__)
            try:
                answer = work(FakeUow(self.world))
            except BaseException:
                self.world.__dict__.update(before)
                raise
            if isinstance(answer, Rollback):
                self.world.__dict__.update(before)
                return answer.value
            return answer

    def uow_factory(self, read_only: bool = False) -> FakeUow:
        return FakeUow(self.world)


class FakeStorage:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def write(self, key: str, data: bytes) -> None:
        self.files[key] = data

    def delete(self, key: str) -> None:
        self.files.pop(key, None)


class FakeProvider(CharacterBilled):
    """Answers every call, noting how many slots were free while it was in flight; or
    raises the next of ``failures``."""

    name, voices, max_chars, content_type = "fake", ("alloy",), 4096, "audio/mpeg"
    file_extension = "mp3"

    def __init__(self, world: World, *failures: Exception) -> None:
        self.world = world
        self.failures = list(failures)
        self.free_during_calls: list[int] = []
        self.voices_sent: list[str] = []  # the voice of every call

    def synthesize(self, text: str, voice: str, options: Any = None) -> bytes:
        self.free_during_calls.append(self.world.free_slots)
        self.voices_sent.append(voice)
        if self.failures:
            raise self.failures.pop(0)
        return b"audio"


def _steps(
    world: World, *failures: Exception, draining: Callable[[], bool] = lambda: False
) -> Steps:
    settings = Settings(worker_dead_seconds=60.0, tts_timeout_seconds=1.0, tts_max_attempts=3)
    tx = FakeTx(world)
    gate = ProviderGate(lambda work: tx(lambda uow: work(uow.slots)), settings, lambda: 1)
    provider = FakeProvider(world, *failures)
    return Steps(cast(Any, tx), gate, cast(Any, provider), cast(Any, FakeStorage()), settings,
                 draining)  # fmt: skip


def _world(*texts: str, **kw: Any) -> World:
    world = World(**kw)
    for n, text in enumerate(texts, start=1):
        world.statuses[n], world.texts[n] = "PENDING", text
    return world


def _run() -> Run:
    return Run(JOB, ATTEMPT, voice="alloy", organization_id=ORG)


def _attempt(world: World, run: Run, item_id: int = 1) -> Attempt:
    return Attempt(run, item_id, world.texts[item_id], "fp")


def _files(steps: Steps) -> dict[str, bytes]:
    return cast(FakeStorage, steps.storage).files


def _provider(steps: Steps) -> FakeProvider:
    return cast(FakeProvider, steps.provider)


# begin


def test_begin_makes_the_item_generating_with_a_reservation_and_a_slot() -> None:
    world = _world("hello")
    begun = begin(_steps(world), _attempt(world, _run()))
    assert begun.outcome is Outcome.BEGUN and begun.number == 1
    assert begun.reservation is not None and begun.slot is not None
    assert world.statuses[1] == "GENERATING"
    assert world.billed == 5 and world.free_slots == 0


def test_begin_reuses_finished_audio_without_a_call_slot_or_reservation() -> None:
    world = _world("hello", "hello")
    world.statuses[1], world.audio[1], world.fingerprints[1] = "DONE", "a.mp3", "fp"
    begun = begin(_steps(world), _attempt(world, _run(), 2))
    assert begun.outcome is Outcome.REUSED and begun.reused_from == 1
    assert begun.reservation is None and begun.slot is None
    assert world.statuses[2] == "DONE" and world.audio[2] == "a.mp3"
    assert world.billed == 0 and world.free_slots == 1


def test_begin_of_a_fenced_run_is_fenced_and_writes_nothing() -> None:
    world = _world("hello", fenced=True)
    run = _run()
    assert begin(_steps(world), _attempt(world, run)).outcome is Outcome.FENCED
    assert run.fenced.is_set()
    assert world.statuses[1] == "PENDING" and world.billed == 0


def test_over_budget_leaves_the_item_pending_and_stops_the_run() -> None:
    world = _world("hello", budget=3)
    run = _run()
    steps = _steps(world)
    ended = run_item(steps, run, 1, "hello", "fp")
    assert ended.outcome is Outcome.OVER_BUDGET
    assert run.over_budget is not None and "over budget" in run.over_budget
    assert world.statuses[1] == "PENDING" and world.billed == 0
    assert _provider(steps).free_during_calls == []


def test_an_item_is_sent_with_its_own_voice_else_the_jobs() -> None:
    world = _world("hello", "bye")
    steps = _steps(world)
    assert run_item(steps, _run(), 1, "hello", "fp1", "echo").outcome is Outcome.SENT
    assert run_item(steps, _run(), 2, "bye", "fp2").outcome is Outcome.SENT
    assert _provider(steps).voices_sent == ["echo", "alloy"]


class OtherProvider(FakeProvider):
    """A second provider of the deployment."""

    name, voices = "other", ("rachel",)


def test_a_line_is_gated_billed_and_sent_by_its_own_voices_provider() -> None:
    world = _world("hello", "bye")
    settings = Settings(worker_dead_seconds=60.0, tts_timeout_seconds=1.0, tts_max_attempts=3)
    tx = FakeTx(world)
    slot_tx = lambda work: tx(lambda uow: work(uow.slots))  # noqa: E731
    default, other = FakeProvider(world), OtherProvider(world)
    both = ProviderSet({"fake": default, "other": other})
    gates = {"other": ProviderGate(slot_tx, settings, lambda: 1, lane=Lane(1, 0, 100_000, 2))}
    steps = Steps(cast(Any, tx), ProviderGate(slot_tx, settings, lambda: 1), both,
                  cast(Any, FakeStorage()), settings, lambda: False, gates)  # fmt: skip
    run = Run(JOB, ATTEMPT, voice="alloy", provider=default, organization_id=ORG)
    assert run_item(steps, run, 1, "hello", "fp1", "other:rachel").outcome is Outcome.SENT
    assert run_item(steps, run, 2, "bye", "fp2", "fake:alloy").outcome is Outcome.SENT
    assert other.voices_sent == ["rachel"] and default.voices_sent == ["alloy"]
    assert world.slots_from == [100_000, 0]  # each line on its own provider's slots
    assert world.billed_to == ["other", "fake"]


def test_begin_without_a_free_slot_rolls_back_waits_and_begins_when_one_is_released() -> None:
    world = _world("hello", free_slots=0)
    steps = _steps(world)
    answers: list[Attempt] = []
    thread = threading.Thread(target=lambda: answers.append(begin(steps, _attempt(world, _run()))))
    thread.start()
    thread.join(0.1)
    assert thread.is_alive() and answers == []
    assert world.statuses[1] == "PENDING" and world.billed == 0  # rolled back
    with cast(FakeTx, steps.tx).lock:
        world.free_slots = 1
    steps.gate.released(99)
    thread.join(2)
    assert answers and answers[0].outcome is Outcome.BEGUN and answers[0].slot is not None
    assert world.statuses[1] == "GENERATING"


def test_an_item_waiting_for_a_slot_is_left_pending_when_the_process_drains() -> None:
    world = _world("hello", free_slots=0)
    run = _run()
    ended = run_item(_steps(world, draining=lambda: True), run, 1, "hello", "fp")
    assert ended.outcome is Outcome.NOT_SENT
    assert run.left_items and world.statuses[1] == "PENDING"


# send and the hold


def test_a_sent_item_is_done_and_its_slot_went_back_as_soon_as_its_answer_came() -> None:
    """The slot is held during the call only, not while the audio is measured and
    stored: another item may start its call meanwhile."""
    world = _world("hello")
    world.audio[1] = "old.mp3"
    steps = _steps(world)
    _files(steps)["old.mp3"] = b"old"
    ended = run_item(steps, _run(), 1, "hello", "fp")
    assert ended.outcome is Outcome.SENT
    assert _provider(steps).free_during_calls == [0] and world.free_slots == 1
    assert world.statuses[1] == "DONE"
    assert _files(steps) == {"jobs/1/1-a1.mp3": b"audio"}  # the replaced file deleted
    assert world.billed == 5 and world.in_doubt == 0  # received: billed


def test_a_retry_begins_again_and_bills_its_own_attempt() -> None:
    world = _world("hello")
    steps = _steps(world, RetryableProviderError("overloaded", 503))
    ended = run_item(steps, _run(), 1, "hello", "fp")
    assert ended.outcome is Outcome.SENT and ended.number == 2
    assert world.billed == 10 and world.free_slots == 1


def test_an_attempt_that_never_left_is_refunded_and_one_in_doubt_is_billed() -> None:
    world = _world("hello")
    steps = _steps(
        world,
        RetryableProviderError("cannot reach provider", delivery=Delivery.NOT_SENT),
        RetryableProviderError("provider timed out", delivery=Delivery.IN_DOUBT),
    )
    ended = run_item(steps, _run(), 1, "hello", "fp")
    assert ended.outcome is Outcome.SENT and ended.number == 3
    assert world.billed == 10  # the timed-out call and the answered one
    assert world.in_doubt == 5


def test_a_slot_taken_over_while_its_holder_waited_is_not_sent_on() -> None:
    """A begun attempt whose slot confirmation is no longer fresh renews it before the
    send; when the slot went to someone else meanwhile (its token moved on), nothing is
    sent on it: the attempt begins again with a slot of its own."""
    world = _world("hello", free_slots=2)
    steps = _steps(world)
    run = _run()
    begun = begin(steps, _attempt(world, run)).to(Outcome.BEGUN, confirmed_at=float("-inf"))
    assert begun.slot is not None
    world.held[begun.slot.slot] += 100  # reclaimed by another holder
    with holding(steps, begun) as hold:
        sent = send(steps, begun, hold)
    assert sent.outcome is Outcome.NO_SLOT and sent.number == 0
    assert _provider(steps).free_during_calls == []
    assert world.billed == 0  # its reservation went back


def test_an_attempt_not_sent_gives_back_its_reservation_once() -> None:
    world = _world("hello")
    steps = _steps(world)
    begun = begin(steps, _attempt(world, _run()))
    with holding(steps, begun):
        pass
    with holding(steps, begun):  # a retried give-back: the reservation is flipped already
        pass
    assert world.billed == 0 and world.free_slots == 1


# finish


def test_finish_error_marks_the_item() -> None:
    world = _world("hello")
    steps = _steps(world)
    begun = begin(steps, _attempt(world, _run()))
    ended = finish(steps, begun.to(Outcome.FAILED, error="provider said no"))
    assert ended.outcome is Outcome.FAILED and world.statuses[1] == "ERROR"


def test_a_lost_finish_deletes_its_audio_only_when_nothing_refers_to_it() -> None:
    world = _world("hello")
    steps = _steps(world)
    run = _run()
    begun = begin(steps, _attempt(world, run))
    world.fenced = True
    ended = finish(steps, begun.to(Outcome.SENT, audio=b"audio"))
    assert ended.outcome is Outcome.FENCED and run.fenced.is_set()
    assert _files(steps) == {} and world.statuses[1] == "GENERATING"


def test_a_lost_finish_keeps_audio_that_a_lost_acknowledgement_made_current() -> None:
    """The first commit of the finish made the audio the item's and its acknowledgement
    was lost; the retry's fence then lost (a cancel in between): the file stays."""
    world = _world("hello")
    steps = _steps(world)
    begun = begin(steps, _attempt(world, _run()))
    world.fenced, world.statuses[1], world.audio[1] = True, "DONE", "jobs/1/1-a1.mp3"
    finish(steps, begun.to(Outcome.SENT, audio=b"audio"))
    assert _files(steps) == {"jobs/1/1-a1.mp3": b"audio"}
