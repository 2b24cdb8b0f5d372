"""The ends of renders and exports (completed, failed, recovered) are told, both databases:
each event is recorded once, in the transaction that ends the render or export (an end
that loses its fence records nothing), and delivered with a signature that
``standardwebhooks`` verifies."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import pytest
from sqlalchemy import select, update

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.job_locks import job_locks
from speechbatch.adapters.repositories.webhooks import webhook_events
from speechbatch.app import Services
from speechbatch.runner.builders import Builders
from speechbatch.runner.export_builder import wait_for_exports
from speechbatch.runner.render_builder import wait_for_renders
from speechbatch.services import webhooks as hooks
from speechbatch.services.exports import RECOVERED_MESSAGE as EXPORT_RECOVERED
from speechbatch.services.exports import get_export, start_export
from speechbatch.services.ports import Storage
from speechbatch.services.renders import RECOVERED_MESSAGE, get_render, start_render
from tests.helpers import ago, concrete, new_admin, wait_for
from tests.support.render_audio import Tone, finished_job
from tests.support.storages import StorageProxy
from tests.support.webhook_receiver import Receiver

TONES = [Tone("One.", 0.4, 440, 0.1), Tone("Two.", 0.5, 550, 0.1)]
EVENTS = ["render.completed", "render.failed", "export.completed", "export.failed"]


class GatedStorage(StorageProxy):
    """Reads wait for a gate, so a test can catch a builder mid-way."""

    def __init__(self, inner: Storage, gate: threading.Event) -> None:
        super().__init__(inner)
        self.gate = gate

    def open(self, key: str) -> BinaryIO:
        self.gate.wait(15)
        return super().open(key)


class BrokenStorage(StorageProxy):
    """Every read fails as a disk would."""

    def open(self, key: str) -> BinaryIO:
        raise PermissionError(13, "Permission denied", key)


@pytest.fixture(autouse=True)
def builders_end() -> Iterator[None]:
    """Every builder of the test ends before the app and its database go away."""
    yield
    assert wait_for_renders(30) and wait_for_exports(30), "a builder was still running"


@pytest.fixture
def told(
    sending: Callable[..., Services], receiver: Receiver
) -> tuple[Services, UserRecord, Receiver]:
    """An app that sends, its admin, and a receiver subscribed to render and export ends."""
    svc = sending()
    user = new_admin(svc, "acme", "admin@acme.test")
    webhook_id = int(
        hooks.create_webhook(svc.uow_factory, user, {"url": receiver.url, "events": EVENTS})["id"]
    )
    with svc.uow_factory(read_only=True) as uow:
        record = uow.webhooks.get_webhook(webhook_id, user.organization_id)
    assert record is not None
    receiver.secret = record.secret
    return svc, user, receiver


def recorded(svc: Services) -> list[dict[str, Any]]:
    """Every event in the outbox, oldest first."""
    with concrete(svc.uow_factory)() as uow:
        rows = uow.session.execute(
            select(webhook_events.c.body).order_by(webhook_events.c.id)
        ).all()
        return [json.loads(row.body) for row in rows]


def delivered(receiver: Receiver, count: int) -> list[dict[str, Any]]:
    """The payloads of the first ``count`` requests, each one's signature verified."""
    wait_for(lambda: receiver.count() >= count)
    assert all(r.verified for r in receiver.received)
    return [r.payload for r in receiver.received if r.payload is not None]


def expire_lock(svc: Services, lock_id: int | None) -> None:
    """The holder of this grant stops renewing (as a SIGKILLed process would)."""
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(
            update(job_locks).where(job_locks.c.id == lock_id).values(expires_at=ago(1))
        )
        uow.commit()


def reading(svc: Services, storage: Storage) -> Builders:
    """Builders of the app's database that read and write through ``storage``."""
    return Builders(svc.uow_factory, storage, svc.settings)


def lock_of(svc: Services, user: UserRecord, job_id: int, render_id: int) -> int | None:
    with svc.uow_factory(read_only=True) as uow:
        record = uow.renders.get_render(render_id, job_id, user.organization_id)
    assert record is not None
    return record.lock_id


def render_told(
    told: tuple[Services, UserRecord, Receiver], missing_audio: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Render a finished job (one item's audio gone when ``missing_audio``): the one
    delivered payload, and the render as the API shows it afterwards."""
    svc, user, receiver = told
    job_id = finished_job(svc, user, TONES)
    if missing_audio:
        svc.storage.delete(f"jobs/{job_id}/tone-2.mp3")  # the build cannot read it
    body = {"format": "mp3"}
    started = start_render(svc.uow_factory, svc.settings, svc.builders, user, job_id, body)
    assert wait_for_renders(30)
    (payload,) = delivered(receiver, 1)
    return payload, get_render(svc.uow_factory, user, job_id, started["id"])


def test_a_render_that_completes_is_told_once(told: tuple[Services, UserRecord, Receiver]) -> None:
    payload, shown = render_told(told, missing_audio=False)
    assert payload["type"] == "render.completed"
    assert payload["data"] == {"render": shown}
    assert shown["status"] == "COMPLETED" and shown["download_url"] is not None
    assert [e["type"] for e in recorded(told[0])] == ["render.completed"]


def test_a_render_that_fails_is_told_once(told: tuple[Services, UserRecord, Receiver]) -> None:
    payload, shown = render_told(told, missing_audio=True)
    assert payload["type"] == "render.failed"
    assert payload["data"] == {"render": shown}
    assert shown["status"] == "FAILED" and shown["error_message"].startswith("render failed")
    assert [e["type"] for e in recorded(told[0])] == ["render.failed"]


def test_a_recovered_render_is_told_once_and_its_fenced_builder_tells_nothing(
    told: tuple[Services, UserRecord, Receiver],
) -> None:
    svc, user, receiver = told
    job_id = finished_job(svc, user, TONES)
    gate = threading.Event()
    try:
        started = start_render(
            svc.uow_factory, svc.settings, reading(svc, GatedStorage(svc.storage, gate)), user,
            job_id, {"format": "mp3"},
        )  # fmt: skip
        expire_lock(svc, lock_of(svc, user, job_id, started["id"]))
        shown = get_render(svc.uow_factory, user, job_id, started["id"])  # recovers it
        assert get_render(svc.uow_factory, user, job_id, started["id"]) == shown
    finally:
        gate.set()  # the builder wakes up: fenced, it ends without a word
    assert wait_for_renders(30)
    (payload,) = delivered(receiver, 1)
    assert (shown["status"], shown["error_message"]) == ("FAILED", RECOVERED_MESSAGE)
    assert payload["type"] == "render.failed" and payload["data"] == {"render": shown}
    threading.Event().wait(0.3)  # a few sender polls: nothing more comes
    assert receiver.count() == 1
    assert [e["type"] for e in recorded(svc)] == ["render.failed"]


def test_an_export_is_told_once_in_its_ending_transaction_and_not_when_fenced(
    told: tuple[Services, UserRecord, Receiver],
) -> None:
    svc, user, receiver = told
    finished_job(svc, user, TONES)
    done = start_export(svc.uow_factory, svc.settings, svc.builders, user)
    assert wait_for_exports(30)
    (payload,) = delivered(receiver, 1)
    assert payload["type"] == "export.completed"
    assert payload["data"] == {"export": get_export(svc.uow_factory, user, done["id"])}
    assert payload["data"]["export"]["status"] == "COMPLETED"

    gate = threading.Event()
    try:
        fenced = start_export(
            svc.uow_factory, svc.settings, reading(svc, GatedStorage(svc.storage, gate)), user
        )
        with svc.uow_factory(read_only=True) as uow:
            record = uow.exports.get_export(fenced["id"], user.organization_id)
        assert record is not None
        expire_lock(svc, record.lock_id)
    finally:
        gate.set()  # its builder wakes up, loses the fence and ends without a word
    assert wait_for_exports(30)
    assert [e["type"] for e in recorded(svc)] == ["export.completed"]
    # The next read recovers it: that transaction tells its end, once.
    shown = get_export(svc.uow_factory, user, fenced["id"])
    assert get_export(svc.uow_factory, user, fenced["id"]) == shown
    assert (shown["status"], shown["error_message"]) == ("FAILED", EXPORT_RECOVERED)
    _, failed = delivered(receiver, 2)
    assert failed["type"] == "export.failed" and failed["data"] == {"export": shown}
    assert [e["type"] for e in recorded(svc)] == ["export.completed", "export.failed"]


def test_an_export_that_fails_is_told_once(told: tuple[Services, UserRecord, Receiver]) -> None:
    svc, user, receiver = told
    finished_job(svc, user, TONES)
    broken = reading(svc, BrokenStorage(svc.storage))
    started = start_export(svc.uow_factory, svc.settings, broken, user)
    assert wait_for_exports(30)
    (payload,) = delivered(receiver, 1)
    shown = get_export(svc.uow_factory, user, started["id"])
    assert shown["status"] == "FAILED" and shown["error_message"].startswith("export failed")
    assert payload["type"] == "export.failed" and payload["data"] == {"export": shown}
    assert [e["type"] for e in recorded(svc)] == ["export.failed"]
