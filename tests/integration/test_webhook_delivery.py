"""Webhook deliveries in process, both databases: a local receiver scripted per attempt,
the retry schedule, stable ids, signatures (checked with ``standardwebhooks``), the
outbox of a run's and an export's end, disabled webhooks, SSRF refusals, the claim."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from speechbatch.adapters import metrics
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.deliveries import DeliveryRules
from speechbatch.app import Services
from speechbatch.runner.export_builder import wait_for_exports
from speechbatch.services import create_job, start_generation
from speechbatch.services import webhooks as hooks
from speechbatch.services.exports import start_export
from tests.fakes import FakeProvider, permanent
from tests.helpers import (
    LIMITS,
    ago,
    concrete,
    new_admin,
    new_job,
    new_worker,
    set_worker,
    wait_for,
)
from tests.support.webhook_receiver import Receiver

ALL_JOB_EVENTS = ["job.completed", "job.failed", "export.completed"]


def _hook(svc: Services, user: UserRecord, url: str, events: list[str] | None = None) -> int:
    body = {"url": url, "events": events or ALL_JOB_EVENTS}
    return int(hooks.create_webhook(svc.uow_factory, user, body)["id"])


def _secret(svc: Services, user: UserRecord, webhook_id: int) -> str:
    with svc.uow_factory(read_only=True) as uow:
        record = uow.webhooks.get_webhook(webhook_id, user.organization_id)
    assert record is not None
    return record.secret


def _deliveries(svc: Services, user: UserRecord, webhook_id: int) -> list[dict[str, Any]]:
    return hooks.list_deliveries(svc.uow_factory, user, webhook_id)


def _settled(svc: Services, user: UserRecord, webhook_id: int) -> list[dict[str, Any]]:
    """The deliveries once none is PENDING."""
    found = _deliveries(svc, user, webhook_id)
    return found if found and all(d["status"] != "PENDING" for d in found) else []


def _attempts(label: str) -> float:
    return metrics.WEBHOOK_ATTEMPTS.labels(result=label)._value.get()


def test_each_kind_of_failure_is_retried_on_schedule_with_one_id(
    sending: Callable[..., Services], receiver: Receiver
) -> None:
    # Attempt 1: 500 and the listener closes for 1 s; 2: refused; 3: a hang past the
    # 0.5 s timeout; 4: a redirect (not followed); 5: delivered.
    svc = sending(schedule=(0.2, 1.5, 0.2, 0.2, 10))
    user = new_admin(svc, "acme", "admin@acme.test")
    webhook_id = _hook(svc, user, receiver.url)
    receiver.secret = _secret(svc, user, webhook_id)
    receiver.script = ["refuse", "hang", "redirect", 204]
    before = {k: _attempts(k) for k in metrics.WEBHOOK_ATTEMPT_RESULTS}
    event_id = hooks.ping(svc.uow_factory, user, webhook_id)["event_id"]
    (delivery,) = wait_for(lambda: _settled(svc, user, webhook_id), timeout=20)
    assert (delivery["status"], delivery["attempts"]) == ("DELIVERED", 5)
    assert delivery["last_status_code"] == 204 and delivery["delivered_at"] is not None
    assert receiver.ids() == [event_id] * 4  # the refused attempt never arrived
    assert all(r.verified for r in receiver.received)
    assert len({r.headers["webhook-signature"] for r in receiver.received}) >= 2
    assert {r.body for r in receiver.received} == {receiver.received[0].body}
    at = [r.at for r in receiver.received]
    assert at[1] - at[0] >= 0.2 + 1.5 - 0.05  # the refused attempt's wait, then the next
    assert at[2] - at[1] >= 0.5 + 0.2 - 0.05  # the timeout, then the wait
    assert at[3] - at[2] >= 0.2 - 0.05
    grown = {k: _attempts(k) - before[k] for k in before}
    assert grown == {
        "delivered": 1, "error_status": 1, "redirect": 1, "timeout": 1,
        "connection_error": 1, "forbidden_address": 0,
    }  # fmt: skip


def test_a_delivery_fails_when_the_schedule_is_used_up_and_redeliver_starts_again(
    sending: Callable[..., Services],
) -> None:
    failing = Receiver(default=503)
    try:
        svc = sending(schedule=(0.1, 0.1))
        user = new_admin(svc, "acme", "admin@acme.test")
        webhook_id = _hook(svc, user, failing.url)
        failing.secret = _secret(svc, user, webhook_id)
        hooks.ping(svc.uow_factory, user, webhook_id)
        (delivery,) = wait_for(lambda: _settled(svc, user, webhook_id))
        assert (delivery["status"], delivery["attempts"]) == ("FAILED", 3)
        assert delivery["last_error"] == "HTTP 503" and delivery["next_attempt_at"] is None
        hooks.redeliver(svc.uow_factory, user, webhook_id, delivery["id"])
        wait_for(lambda: (d := _settled(svc, user, webhook_id)) and d[0]["attempts"] == 6)
        assert len(set(failing.ids())) == 1 and failing.count() == 6
        assert all(r.verified for r in failing.received)
    finally:
        failing.stop()


def test_a_run_that_ends_is_told_completed_or_failed_with_its_run(
    sending: Callable[..., Services], receiver: Receiver, provider: FakeProvider
) -> None:
    svc = sending()
    user = new_admin(svc, "acme", "admin@acme.test")
    receiver.secret = _secret(svc, user, _hook(svc, user, receiver.url))
    good = new_job(svc, user, 2, title="good")
    start_generation(svc.uow_factory, svc.settings, svc.runner, user, good)
    wait_for(lambda: receiver.count() == 1)
    provider.fail_texts["bad 1"] = permanent()
    bad = create_job(svc.uow_factory, user, "bad", "alloy", ["bad 1", "bad 2"], LIMITS)
    start_generation(svc.uow_factory, svc.settings, svc.runner, user, bad)
    wait_for(lambda: receiver.count() == 2)
    completed, failed = (r.payload for r in receiver.received)
    assert completed is not None and failed is not None
    assert completed["type"] == "job.completed" and failed["type"] == "job.failed"
    assert (
        completed["data"]["job"]["id"] == good and completed["data"]["job"]["status"] == "COMPLETED"
    )
    assert completed["data"]["run"]["outcome"] == "COMPLETED"
    assert failed["data"]["job"]["progress"]["error"] == 1
    assert failed["data"]["run"]["outcome"] == "FAILED" and failed["data"]["run"]["attempt"] == 1
    assert all(r.verified for r in receiver.received)


def test_an_export_that_completes_is_told(
    sending: Callable[..., Services], receiver: Receiver
) -> None:
    svc = sending()
    user = new_admin(svc, "acme", "admin@acme.test")
    receiver.secret = _secret(svc, user, _hook(svc, user, receiver.url, ["export.completed"]))
    export = start_export(svc.uow_factory, svc.settings, svc.builders, user)
    assert wait_for_exports(20)
    wait_for(lambda: receiver.count() == 1)
    payload = receiver.received[0].payload
    assert payload is not None and payload["type"] == "export.completed"
    assert payload["data"]["export"]["id"] == export["id"]
    assert payload["data"]["export"]["status"] == "COMPLETED"


def test_a_disabled_webhook_gets_nothing_until_enabled(
    sending: Callable[..., Services], receiver: Receiver
) -> None:
    svc = sending()
    user = new_admin(svc, "acme", "admin@acme.test")
    webhook_id = _hook(svc, user, receiver.url)
    receiver.secret = _secret(svc, user, webhook_id)
    hooks.update_webhook(svc.uow_factory, user, webhook_id, {"enabled": False})
    first = hooks.ping(svc.uow_factory, user, webhook_id)["event_id"]
    second = hooks.ping(svc.uow_factory, user, webhook_id)["event_id"]
    threading.Event().wait(0.6)  # a dozen sender polls
    assert receiver.count() == 0
    assert [d["attempts"] for d in _deliveries(svc, user, webhook_id)] == [0, 0]
    hooks.update_webhook(svc.uow_factory, user, webhook_id, {"enabled": True})
    wait_for(lambda: receiver.count() == 2)
    assert sorted(receiver.ids()) == sorted([first, second])
    assert all(r.verified for r in receiver.received)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_private_addresses_are_refused_by_ip_and_by_name(
    sending: Callable[..., Services], receiver: Receiver, host: str
) -> None:
    svc = sending(schedule=(), allow_private=False)
    user = new_admin(svc, "acme", "admin@acme.test")
    webhook_id = _hook(svc, user, f"http://{host}:{receiver.port}/hook")
    hooks.ping(svc.uow_factory, user, webhook_id)
    (delivery,) = wait_for(lambda: _settled(svc, user, webhook_id))
    assert delivery["status"] == "FAILED" and delivery["attempts"] == 1
    assert "refused" in delivery["last_error"] and "127.0.0.1" in delivery["last_error"]
    assert "SPEECHBATCH_WEBHOOK_ALLOW_PRIVATE" in delivery["last_error"]
    assert receiver.count() == 0


# No attempt in flight here (nothing is sent): a dead holder's delivery goes at once.
RULES = DeliveryRules(lease_seconds=30.0, worker_dead_seconds=5.0, attempt_seconds=0.0)


def test_one_sender_claims_a_delivery_and_a_dead_senders_is_claimed_again(
    svc: Services, admin: UserRecord
) -> None:
    webhook_id = _hook(svc, admin, "https://example.com/hook")
    hooks.ping(svc.uow_factory, admin, webhook_id)
    workers = [new_worker(svc) for _ in range(8)]
    barrier = threading.Barrier(len(workers))
    won: list[int] = []

    def claim(worker_id: int) -> None:
        barrier.wait()
        with concrete(svc.uow_factory)() as uow:
            claimed = uow.deliveries.claim_delivery(worker_id, RULES)
            uow.commit()
        if claimed is not None:
            won.append(worker_id)

    threads = [threading.Thread(target=claim, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    with concrete(svc.uow_factory)() as uow:
        assert uow.deliveries.claim_delivery(workers[1], RULES) is None  # held, alive
    with concrete(svc.uow_factory)() as uow:
        first = uow.deliveries.list_deliveries(webhook_id)[0]
    set_worker(svc, won[0], heartbeat_at=ago(3600))  # the holder's process died
    with concrete(svc.uow_factory)() as uow:
        again = uow.deliveries.claim_delivery(workers[-1], RULES)
        uow.commit()
    assert again is not None and again.attempts == 2 and again.id == first["id"]
    with concrete(svc.uow_factory)() as uow:
        stale = replace(again, token=again.token - 1)  # the dead holder's claim
        assert not uow.deliveries.finish_delivery(
            stale, delivered=True, status_code=200, error=None, retry_in=None
        )
        assert uow.deliveries.finish_delivery(
            again, delivered=True, status_code=200, error=None, retry_in=None
        )
        uow.commit()


def test_the_oldest_pending_age_counts_enabled_webhooks_on_the_database_clock(
    svc: Services, admin: UserRecord
) -> None:
    webhook_id = _hook(svc, admin, "https://example.com/hook")
    with concrete(svc.uow_factory)() as uow:
        assert uow.deliveries.oldest_pending_age() == 0.0
    hooks.ping(svc.uow_factory, admin, webhook_id)
    threading.Event().wait(0.3)
    with concrete(svc.uow_factory)() as uow:
        assert 0.25 <= uow.deliveries.oldest_pending_age() < 30
    hooks.update_webhook(svc.uow_factory, admin, webhook_id, {"enabled": False})
    with concrete(svc.uow_factory)() as uow:
        assert uow.deliveries.oldest_pending_age() == 0.0
