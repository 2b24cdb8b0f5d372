"""Runs share the provider: slots across processes, visible waiting, a 429 pauses all."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from sqlalchemy import event, select

from speechbatch import create_app
from speechbatch.adapters.models import ProviderSlot
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.slots import SlotGrant
from speechbatch.app import Services
from speechbatch.config import Settings
from speechbatch.runner import gate as gate_module
from speechbatch.services import create_job, get_job, start_generation
from speechbatch.services.spending import cancel_generation
from tests.conftest import close_services, services, with_settings
from tests.fakes import FakeProvider, rate_limited
from tests.helpers import LIMITS, claim, concrete, new_job, view, wait_for
from tests.integration.test_pages import sign_in


@pytest.fixture
def two_processes(settings: Settings) -> Iterator[tuple[Services, Services, FakeProvider]]:
    """Two apps (two runners, as two processes would be) on one database and one provider,
    sharing two slots, each running up to four calls per job."""
    provider = FakeProvider(latency=0.05)
    shared = with_settings(settings, provider_concurrency=2, item_concurrency=4)
    apps = [services(create_app(shared, provider=provider)) for _ in range(2)]
    yield apps[0], apps[1], provider
    for svc in apps:
        close_services(svc)


def _done(svc: Services, user: UserRecord, job_id: int) -> bool:
    return view(svc, user, job_id)["status"] != "GENERATING"


def _job(svc: Services, user: UserRecord, *texts: str) -> int:
    return create_job(svc.uow_factory, user, "job", "alloy", list(texts), LIMITS)


def _run_listening(
    svc: Services, user: UserRecord, job_id: int, name: str, listener: Callable[..., None]
) -> None:
    """Generate the job to its end with ``listener`` on the engine's event ``name``."""
    engine = concrete(svc.uow_factory).session_factory.kw["bind"]
    event.listen(engine, name, listener)
    try:
        start_generation(svc.uow_factory, svc.settings, svc.runner, user, job_id)
        wait_for(lambda: _done(svc, user, job_id), timeout=20)
        wait_for(lambda: not svc.runner.live_runs())
    finally:
        event.remove(engine, name, listener)
    assert view(svc, user, job_id)["status"] == "COMPLETED"


def _hold_the_only_slot_elsewhere(svc: Services, user: UserRecord) -> SlotGrant:
    """Another (live) process runs a job that holds the deployment's only slot."""
    blocker = _job(svc, user, "blocker")
    attempt = claim(svc, user, blocker)
    assert attempt is not None
    with concrete(svc.uow_factory)() as uow:
        other = uow.workers.register_worker("elsewhere", 1)
        grant = uow.slots.acquire_slot(
            other, blocker, attempt, capacity=1, worker_dead_seconds=30, max_hold_seconds=300
        )
        uow.commit()
    assert grant is not None
    return grant


def _waiting_for_slot(svc: Services, user: UserRecord, job_id: int) -> int:
    lease = get_job(svc.uow_factory, svc.settings, user, job_id)["lease"]
    return int(lease["waiting_for_slot"])


def test_calls_in_flight_never_exceed_the_deployments_slots(
    two_processes: tuple[Services, Services, FakeProvider], admin: UserRecord
) -> None:
    first, second, provider = two_processes
    jobs = [
        (svc, _job(svc, admin, *(f"job {n} item {i}" for i in range(8))))
        for n, svc in enumerate([first, second])
    ]
    for svc, job_id in jobs:
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    for svc, job_id in jobs:
        wait_for(lambda s=svc, j=job_id: _done(s, admin, j), timeout=30)  # type: ignore[misc]
        assert view(svc, admin, job_id)["status"] == "COMPLETED"
    assert provider.total_calls() == 16
    assert provider.max_in_flight == 2


def test_items_waiting_for_a_slot_show_on_the_job(
    make_svc: Callable[..., Services], admin: UserRecord, provider: FakeProvider
) -> None:
    svc = make_svc(provider_concurrency=1)
    grant = _hold_the_only_slot_elsewhere(svc, admin)
    job_id = _job(svc, admin, "one", "two")
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    # One thread per item waits (ITEM_CONCURRENCY 4, two items); nothing waits for pace.
    wait_for(lambda: _waiting_for_slot(svc, admin, job_id) == 2)
    lease = get_job(svc.uow_factory, svc.settings, admin, job_id)["lease"]
    assert lease["waiting_for_pace"] == 0
    assert provider.total_calls() == 0
    with concrete(svc.uow_factory)() as uow:
        assert uow.slots.release_slot(grant)
        uow.commit()
    wait_for(lambda: _done(svc, admin, job_id), timeout=20)
    job = get_job(svc.uow_factory, svc.settings, admin, job_id)
    assert job["status"] == "COMPLETED"
    assert job["lease"]["waiting_for_slot"] == 0


def _seconds_a_429_holds_back(
    limited_in: Services, other_in: Services, provider: FakeProvider, admin: UserRecord
) -> float:
    """A 429 (Retry-After 1 s) for a job run by ``limited_in``; then a job run by
    ``other_in``: how long after the 429 the other job's call started."""
    provider.fail_texts["limited"] = rate_limited(1.0)
    limited = _job(limited_in, admin, "limited")
    other = _job(other_in, admin, "other 1")
    start_generation(limited_in.uow_factory, limited_in.settings, limited_in.runner, admin, limited)
    wait_for(lambda: provider.calls["limited"] >= 1)
    first_429 = provider.started[0][1]
    start_generation(other_in.uow_factory, other_in.settings, other_in.runner, admin, other)
    wait_for(lambda: _done(other_in, admin, other), timeout=20)
    return next(t for text, t in provider.started if text == "other 1") - first_429


def test_a_429_with_retry_after_pauses_every_start(
    make_svc: Callable[..., Services], admin: UserRecord, provider: FakeProvider
) -> None:
    svc = make_svc(tts_timeout_seconds=2.0)
    assert _seconds_a_429_holds_back(svc, svc, provider, admin) >= 0.9


def test_a_429_in_one_process_pauses_the_starts_of_another(
    settings: Settings, admin: UserRecord
) -> None:
    """Back off together: the pause travels through the database, not a process's memory
    (each app has its own gate and pause cache, as two gunicorn processes do)."""
    provider = FakeProvider()
    shared = with_settings(settings, tts_timeout_seconds=2.0)
    first, second = (services(create_app(shared, provider=provider)) for _ in range(2))
    try:
        held_back = _seconds_a_429_holds_back(first, second, provider, admin)
        assert held_back >= 0.9, held_back
    finally:
        for svc in (first, second):
            close_services(svc)


def test_the_pace_spreads_starts_evenly(
    make_svc: Callable[..., Services], admin: UserRecord, provider: FakeProvider
) -> None:
    # 120 calls a minute: one start every half second, whatever the concurrency.
    svc = make_svc(provider_rpm=120)
    job_id = new_job(svc, admin, 5)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: _done(svc, admin, job_id), timeout=20)
    starts = sorted(t for _, t in provider.started)
    assert len(starts) == 5
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.4, gaps


def _waiting_job(make_svc: Callable[..., Services], admin: UserRecord) -> tuple[Services, int]:
    """A run of one item waiting for the deployment's only slot, held elsewhere."""
    svc = make_svc(provider_concurrency=1)
    _hold_the_only_slot_elsewhere(svc, admin)
    job_id = _job(svc, admin, "one")
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: _waiting_for_slot(svc, admin, job_id))
    return svc, job_id


def test_a_run_cancelled_while_waiting_for_a_slot_sends_nothing(
    make_svc: Callable[..., Services], admin: UserRecord, provider: FakeProvider
) -> None:
    svc, job_id = _waiting_job(make_svc, admin)
    cancel_generation(svc.uow_factory, svc.runner, admin, job_id)
    wait_for(lambda: not svc.runner.live_runs())
    assert provider.total_calls() == 0
    job = view(svc, admin, job_id)
    assert job["items"][0]["status"] == "PENDING"
    assert job["runs"][0]["outcome"] == "CANCELLED"
    assert job["runs"][0]["billed_characters"] == 0  # the reservation was given back


def test_a_drain_while_waiting_ends_the_run_interrupted(
    make_svc: Callable[..., Services], admin: UserRecord, provider: FakeProvider
) -> None:
    svc, job_id = _waiting_job(make_svc, admin)
    svc.runner.drain(5)
    job = view(svc, admin, job_id)
    assert job["runs"][-1]["outcome"] == "INTERRUPTED"
    assert job["runs"][-1]["billed_characters"] == 0
    assert provider.total_calls() == 0


def test_the_job_page_says_items_wait_for_a_slot(
    settings: Settings, admin: UserRecord, provider: FakeProvider
) -> None:
    app = create_app(with_settings(settings, provider_concurrency=1), provider=provider)
    svc = services(app)
    try:
        _hold_the_only_slot_elsewhere(svc, admin)
        job_id = _job(svc, admin, "one")
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
        wait_for(lambda: _waiting_for_slot(svc, admin, job_id))
        client = app.test_client()
        sign_in(client)
        page = client.get(f"/jobs/{job_id}").get_data(as_text=True)
        assert "1 waiting for a provider slot (shared by every job)" in page
    finally:
        close_services(svc)


def select_live_slots() -> Any:
    """The slots held now (not released), with their job."""
    return select(ProviderSlot.job_id).where(ProviderSlot.released_at.is_(None))


def test_an_item_with_a_free_slot_takes_it_at_its_start_and_returns_it_when_the_call_ends(
    make_svc: Callable[..., Services],
    admin: UserRecord,
    provider: FakeProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The common item's start takes its slot; the call gives it back as soon as its
    answer came, before the audio is measured and stored. Per item three commits (start,
    the slot's release, finish); per run its plan and its end. Each call holds a slot of
    its job; none is held once the run is over."""
    svc = make_svc(item_concurrency=1)
    commits: list[str] = []
    held_during_calls: list[list[int]] = []

    reading = threading.local()

    def count(conn: object) -> None:
        # The run's commits; not the read-only one that ends this test's own read below.
        if threading.current_thread().name.startswith("speechbatch-job-") and not getattr(
            reading, "now", False
        ):
            commits.append(threading.current_thread().name)

    inner = provider.synthesize

    def synthesize(text: str, voice: str, options: Mapping[str, Any] | None = None) -> bytes:
        reading.now = True
        try:
            with concrete(svc.uow_factory)(read_only=True) as uow:
                held_during_calls.append(
                    [row.job_id for row in uow.session.execute(select_live_slots()).all()]
                )
        finally:
            reading.now = False
        return inner(text, voice)

    provider.synthesize = synthesize  # type: ignore[method-assign]
    # The one other transaction an item may run: a read of the deployment's 429 pause,
    # at most once per PAUSE_CACHE_SECONDS per process; held for the whole test.
    monkeypatch.setattr(gate_module, "PAUSE_CACHE_SECONDS", 3600.0)
    items = 5
    job_id = _job(svc, admin, *(f"item {i}" for i in range(items)))
    _run_listening(svc, admin, job_id, "commit", count)
    assert held_during_calls == [[job_id]] * items
    assert len(commits) == 3 * items + 2 + 1
    with svc.uow_factory(read_only=True) as uow:
        assert uow.slots.slots_in_flight(worker_dead_seconds=30, max_hold_seconds=300) == 0


def test_a_sent_item_costs_a_bounded_number_of_statements(
    make_svc: Callable[..., Services], admin: UserRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per sent item (the difference between a run of 3 and a run of 6 items). The
    start: the fence, the item's move (with its reuse lookup), the slot, the bill (the
    month's row and the reservation's row, the run's share of the ledger: one statement on
    PostgreSQL, two on SQLite, which has no writes in a WITH): 4 or 5. The slot's release
    when the call's answer came (whose RETURNING notifies on PostgreSQL): 1. The finish: the
    fence, the item's move (which sets its current take), its take's row: 3. (BEGIN and the
    SQLite pragmas are not statements of the work.) 8 on PostgreSQL, 9 on SQLite."""
    monkeypatch.setattr(gate_module, "PAUSE_CACHE_SECONDS", 3600.0)
    svc = make_svc(item_concurrency=1)
    kinds: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        work = not statement.lstrip().upper().startswith(("BEGIN", "PRAGMA"))
        if work and threading.current_thread().name.startswith("speechbatch-job-"):
            kinds.append(" ".join(statement.split()[:3]))

    def statements_of_a_run(n: int, label: str) -> list[str]:
        job_id = _job(svc, admin, *(f"{label} item {i}" for i in range(n)))
        kinds.clear()
        _run_listening(svc, admin, job_id, "before_cursor_execute", count)
        return list(kinds)

    statements_of_a_run(2, "warm-up")  # the first run reads the pause; later ones use the cache
    small, large = statements_of_a_run(3, "small"), statements_of_a_run(6, "large")
    per_item = (len(large) - len(small)) / 3
    bound = 8 if svc.engine.dialect.name == "postgresql" else 9
    assert per_item <= bound, (small, large)
