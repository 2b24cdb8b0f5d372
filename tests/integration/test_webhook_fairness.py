"""Senders within bounds and shared (issue 42), both databases, loopback receivers that
drip their answers: one organization's hanging receivers do not hold another's delivery,
nor one webhook's those of another webhook of its organization, and a delivery has one
attempt in flight however long its receiver drips."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from speechbatch.adapters.repositories.deliveries import DeliveryRules
from speechbatch.adapters.webhook_http import WebhookHTTP
from speechbatch.app import Services
from speechbatch.runner.deliveries import (
    ATTEMPT_MARGIN_SECONDS,
    FOLLOWER_PAUSES,
    SENDER_THREADS,
    DeliverySenders,
)
from speechbatch.services import webhooks as hooks
from tests.helpers import new_admin, wait_for
from tests.integration.test_webhook_delivery import _hook
from tests.support.raw_listeners import DripReceiver
from tests.support.webhook_receiver import Receiver


@pytest.fixture
def drip() -> Iterator[DripReceiver]:
    receiver = DripReceiver(0.3)  # the whole answer takes about 20 s
    yield receiver
    receiver.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    answering = Receiver()
    yield answering
    answering.stop()


def test_another_organizations_ping_is_not_held_behind_hanging_receivers(
    make_svc: Callable[..., Services], drip: DripReceiver, receiver: Receiver
) -> None:
    deadline = 3.0
    svc = make_svc(
        webhook_retry_schedule=(60.0,),
        webhook_allow_private=True,
        webhook_timeout_seconds=deadline,
        webhook_idle_seconds=0.05,
    )
    svc.runner.start_background()
    slow = new_admin(svc, "slow", "admin@slow.test")
    # More webhooks than senders, each with a delivery to a receiver that drips.
    for _ in range(SENDER_THREADS + 2):
        hooks.ping(svc.uow_factory, slow, _hook(svc, slow, f"http://127.0.0.1:{drip.port}/h"))
    wait_for(lambda: drip.open_now >= SENDER_THREADS // 2, timeout=10)
    other = new_admin(svc, "other", "admin@other.test")
    started = time.monotonic()
    hooks.ping(svc.uow_factory, other, _hook(svc, other, receiver.url))
    wait_for(lambda: receiver.count() == 1, timeout=2 * deadline)
    # Without shares every sender was the slow organization's until its deadline.
    assert time.monotonic() - started < deadline / 2
    assert drip.open_now <= SENDER_THREADS // 2


def test_a_hanging_webhook_leaves_a_sender_to_the_other_webhooks_of_its_organization(
    make_svc: Callable[..., Services], drip: DripReceiver, receiver: Receiver
) -> None:
    deadline = 3.0
    svc = make_svc(
        webhook_retry_schedule=(60.0,),
        webhook_allow_private=True,
        webhook_timeout_seconds=deadline,
        webhook_idle_seconds=0.05,
    )
    svc.runner.start_background()
    user = new_admin(svc, "acme", "admin@acme.test")
    hanging = _hook(svc, user, f"http://127.0.0.1:{drip.port}/h")
    for _ in range(SENDER_THREADS):
        hooks.ping(svc.uow_factory, user, hanging)
    wait_for(lambda: drip.open_now >= SENDER_THREADS // 2 - 1, timeout=10)
    time.sleep(0.5)  # ten idle polls: the hanging webhook holds every sender it may
    fast = _hook(svc, user, receiver.url)
    started = time.monotonic()
    for _ in range(5):
        hooks.ping(svc.uow_factory, user, fast)
    wait_for(lambda: receiver.count() == 5, timeout=2 * deadline)
    # Held to its organization's share alone, the hanging webhook took all of it, and
    # the fast one waited for the deadline.
    assert time.monotonic() - started < deadline / 2


def test_a_delivery_has_one_attempt_in_flight_however_long_its_receiver_drips(
    make_svc: Callable[..., Services], drip: DripReceiver
) -> None:
    svc = make_svc(webhook_allow_private=True)
    user = new_admin(svc, "acme", "admin@acme.test")
    webhook_id = _hook(svc, user, f"http://127.0.0.1:{drip.port}/hook")
    # A lease just longer than the attempt's deadline: before the deadline held on the
    # clock, the drip outlived the lease and other senders claimed the delivery again.
    senders = _senders(svc, svc.runner.tx, timeout=0.5, lease=1.0, threads=3, idle=0.05)
    senders.start()
    try:
        hooks.ping(svc.uow_factory, user, webhook_id)
        (delivery,) = wait_for(
            lambda: [d for d in hooks.list_deliveries(svc.uow_factory, user, webhook_id)
                     if d["last_error"]],
            timeout=30,
        )  # fmt: skip
    finally:
        senders.stop()
    assert delivery["attempts"] == 1 and "timed out" in delivery["last_error"]
    assert drip.connections == 1 and drip.most_open == 1


def test_idle_senders_look_one_at_a_time_and_all_wake_for_work(
    make_svc: Callable[..., Services], receiver: Receiver
) -> None:
    svc = make_svc(webhook_allow_private=True)
    user = new_admin(svc, "acme", "admin@acme.test")
    webhook_id = _hook(svc, user, receiver.url)
    claims: list[float] = []

    def counted(work: Callable[..., object]) -> object:
        claims.append(time.monotonic())
        return svc.runner.tx(work)

    idle = 0.05
    senders = _senders(svc, counted, timeout=2.0, lease=5.0, threads=SENDER_THREADS, idle=idle)
    senders.start()
    try:
        time.sleep(0.5)  # every thread has looked once and found nothing
        claims.clear()
        time.sleep(2.0)
        # One looker every pause, and each other sender once in FOLLOWER_PAUSES pauses:
        # about 40 + 36 in 2 s here, where each of the ten looking every pause made 400.
        assert len(claims) <= 2.0 / idle + SENDER_THREADS * 2.0 / (idle * FOLLOWER_PAUSES) + 10
        for _ in range(5):
            hooks.ping(svc.uow_factory, user, webhook_id)
        wait_for(lambda: receiver.count() == 5, timeout=10 * idle + 2.0)
    finally:
        senders.stop()


def _senders(
    svc: Services, tx: Any, *, timeout: float, lease: float, threads: int, idle: float
) -> DeliverySenders:
    """Sender threads of their own (not started), POSTing with ``timeout`` under ``lease``."""
    return DeliverySenders(
        tx,
        lambda: WebhookHTTP(allow_private=True, timeout=timeout),
        (60.0,),
        svc.runner.worker_id,
        DeliveryRules(
            lease_seconds=lease,
            worker_dead_seconds=svc.settings.worker_dead_seconds,
            attempt_seconds=timeout + ATTEMPT_MARGIN_SECONDS,
        ),
        threads=threads,
        idle_seconds=idle,
        join_seconds=2.0,
    )
