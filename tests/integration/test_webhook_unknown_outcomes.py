"""Webhook deliveries whose outcome the database does not know yet, both databases: a
result whose transaction failed is kept and written, never sent again; a delivery whose
sender stopped heartbeating is not claimed while its attempt may still be in flight."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import update

from speechbatch.adapters.db import later
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.deliveries import (
    DeliveriesRepository,
    DeliveryRules,
    deliveries,
)
from speechbatch.app import Services
from speechbatch.services import webhooks as hooks
from tests.helpers import ago, concrete, new_admin, new_worker, set_worker, wait_for
from tests.support.webhook_receiver import Receiver

RULES = DeliveryRules(lease_seconds=30.0, worker_dead_seconds=5.0, attempt_seconds=12.0)


def _hook(svc: Services, user: UserRecord, url: str) -> int:
    body = {"url": url, "events": ["job.completed"]}
    return int(hooks.create_webhook(svc.uow_factory, user, body)["id"])


def test_a_result_whose_transaction_failed_is_written_and_not_sent_again(
    sending: Callable[..., Services], receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim that shares a transaction with the last result fails (as a statement
    does behind a pooler that lost a prepared statement): the delivered result is still
    written at once, and the event is not sent a second time."""
    recorded = threading.local()
    claim, finish = DeliveriesRepository.claim_delivery, DeliveriesRepository.finish_delivery

    def finish_then_arm(self: DeliveriesRepository, *args: Any, **kwargs: Any) -> bool:
        recorded.armed = getattr(recorded, "armed", 0) + 1
        return finish(self, *args, **kwargs)

    def failing_claim(self: DeliveriesRepository, *args: Any, **kwargs: Any) -> Any:
        if getattr(recorded, "armed", 0) == 1:  # the first result's transaction, once
            recorded.armed = 2
            cause = Exception('prepared statement "_pg3_7" does not exist')
            raise sa_exc.ProgrammingError("UPDATE webhook_deliveries ...", {}, cause)
        return claim(self, *args, **kwargs)

    monkeypatch.setattr(DeliveriesRepository, "finish_delivery", finish_then_arm)
    monkeypatch.setattr(DeliveriesRepository, "claim_delivery", failing_claim)
    svc = sending()
    user = new_admin(svc, "acme", "admin@acme.test")
    webhook_id = _hook(svc, user, receiver.url)
    event_id = hooks.ping(svc.uow_factory, user, webhook_id)["event_id"]

    def delivered() -> list[dict[str, Any]]:
        found = hooks.list_deliveries(svc.uow_factory, user, webhook_id)
        return found if found[0]["status"] == "DELIVERED" else []

    (delivery,) = wait_for(delivered, timeout=5)  # well within the 20.5 s lease
    assert delivery["attempts"] == 1
    hooks.ping(svc.uow_factory, user, webhook_id)  # later work goes on as before
    wait_for(lambda: receiver.count() == 2)
    assert receiver.ids()[0] == event_id and len(set(receiver.ids())) == 2


def test_a_delivery_is_not_claimed_again_while_its_attempt_may_be_in_flight(
    svc: Services, admin: UserRecord
) -> None:
    """Its holder stopped heartbeating (dead, or only cut off from the database): the
    delivery is claimed again once its attempt can no longer be in flight, not before."""
    webhook_id = _hook(svc, admin, "https://example.com/hook")
    hooks.ping(svc.uow_factory, admin, webhook_id)
    holder, other = new_worker(svc), new_worker(svc)
    with concrete(svc.uow_factory)() as uow:
        first = uow.deliveries.claim_delivery(holder, RULES)
        uow.commit()
    assert first is not None
    set_worker(svc, holder, heartbeat_at=ago(3600))
    with concrete(svc.uow_factory)() as uow:
        assert uow.deliveries.claim_delivery(other, RULES) is None
    # The claim as if made attempt_seconds ago: its attempt has ended by now.
    ended = RULES.lease_seconds - RULES.attempt_seconds - 0.5
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(
            update(deliveries)
            .where(deliveries.c.id == first.id)
            .values(lease_expires_at=later(ended))
        )
        uow.commit()
    with concrete(svc.uow_factory)() as uow:
        again = uow.deliveries.claim_delivery(other, RULES)
        uow.commit()
    assert again is not None and again.id == first.id and again.attempts == 2
