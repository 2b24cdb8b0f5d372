"""No clean-up on a guess: a commit whose acknowledgement is lost may have happened, and
nothing it may have made current is deleted. Both databases.

The fault is injected in process: the unit of work that makes an item DONE commits, then
something happens (a cancel), then its commit raises DatabaseUnavailable as a connection
dropped right after the server got COMMIT would. The runner retries the unit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.runs import RunsRepository
from speechbatch.adapters.uow import Writer
from speechbatch.app import Services
from speechbatch.errors import DatabaseUnavailable
from speechbatch.services import start_generation
from speechbatch.services.spending import cancel_generation
from tests.fakes import FakeProvider, fake_audio
from tests.helpers import new_job, view, wait_for
from tests.support.storages import read_stored

# Set on a session whose transaction made an item DONE with new audio.
DONE_MOVE = "test-done-move"


class _LostAck:
    """The first commit that makes an item DONE happens, then ``between`` runs, then the
    commit raises as if its acknowledgement were lost."""

    def __init__(self, between: Callable[[], object]) -> None:
        self.between = between
        self.fired = False


@pytest.fixture
def lose_one_ack(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], object]], _LostAck]:
    def lose(between: Callable[[], object]) -> _LostAck:
        lost = _LostAck(between)
        finish_item, commit = RunsRepository.finish_item, Writer.commit

        def marking(self: RunsRepository, *args: Any, **kw: Any) -> Any:
            finished = finish_item(self, *args, **kw)
            if finished and kw.get("audio_path"):
                self.session.info[DONE_MOVE] = True
            return finished

        def committing(self: Writer) -> None:
            commit(self)
            if self.session.info.pop(DONE_MOVE, False) and not lost.fired:
                lost.fired = True
                lost.between()
                raise DatabaseUnavailable()

        monkeypatch.setattr(RunsRepository, "finish_item", marking)
        monkeypatch.setattr(Writer, "commit", committing)
        return lost

    return lose


def _stored_audio(svc: Services, admin: UserRecord, job_id: int, item_id: int) -> bytes:
    with svc.uow_factory(read_only=True) as uow:
        key = uow.views.item_audio(job_id, item_id, admin.organization_id)
    assert key is not None
    return read_stored(svc.storage, key)


def test_a_lost_acknowledgement_then_a_cancel_keeps_the_audio_the_commit_made_current(
    make_svc: Callable[..., Services],
    admin: UserRecord,
    provider: FakeProvider,
    lose_one_ack: Callable[[Callable[[], object]], _LostAck],
) -> None:
    """The finish's COMMIT made item 1 DONE with its audio; its acknowledgement was lost;
    a cancel came in between; the retried finish's fence loses. The item stays DONE and
    its audio stays stored. (Before, the losing retry deleted the file: a DONE item with
    no audio, never sent again.)"""
    svc = make_svc(item_concurrency=1)
    job_id = new_job(svc, admin, 2)
    lost = lose_one_ack(lambda: cancel_generation(svc.uow_factory, svc.runner, admin, job_id))
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    wait_for(lambda: lost.fired and not svc.runner.live_runs(), timeout=20)
    job = view(svc, admin, job_id)
    assert job["runs"][-1]["outcome"] == "CANCELLED"
    first = job["items"][0]
    assert first["status"] == "DONE"
    assert _stored_audio(svc, admin, job_id, first["id"]) == fake_audio("text 1")
    assert provider.total_calls() == 1


def test_a_lost_acknowledgement_alone_is_retried_and_wins_once(
    make_svc: Callable[..., Services],
    admin: UserRecord,
    lose_one_ack: Callable[[Callable[[], object]], _LostAck],
) -> None:
    """Nothing in between: the retried finish writes the same DONE again and wins; the
    job completes with one take per item and every audio stored."""
    svc = make_svc(item_concurrency=1)
    job_id = new_job(svc, admin, 2)
    lost = lose_one_ack(lambda: None)
    start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
    job = wait_for(lambda: (j := view(svc, admin, job_id))["status"] == "COMPLETED" and j)
    assert lost.fired
    for item in job["items"]:
        assert _stored_audio(svc, admin, job_id, item["id"]) == fake_audio(item["text"])
        with svc.uow_factory(read_only=True) as uow:
            assert len(uow.takes.item_takes(item["id"], keep=5)) == 1
