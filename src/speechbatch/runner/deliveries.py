"""Webhook deliveries in the background of a live process: sender threads.

Each sender thread repeats: claim a due delivery (a compare-and-set under a lease on the
database's clock), POST it with no transaction or connection held, then write the result
fenced by the claim's token; the result and the next claim share one short transaction
(one commit per delivery), and a stopping sender records its last result alone. A
failed attempt is due again after the next wait of the retry schedule, counted since the
last redeliver, and FAILED once the schedule is used up. Every attempt
of a delivery carries its event's ``webhook-id`` and body; only the timestamp and the
signature are the attempt's own. A process that dies holding a delivery stops
heartbeating, and another sender claims it again (see ``repositories/deliveries.py``).
Requests never send: the threads are started with the process's background loops.

Senders are shared between organizations (``SenderShares``): an organization may hold at
most ``threads // (organizations in flight here + 1)`` of this process's senders, so
however many of one organization's receivers hang or drip, a sender stays free here for
the next organization's delivery, which goes out within an idle poll. Within that share,
one webhook may hold one sender less than its organization (at least one), so a webhook
whose receiver hangs leaves a sender here for the other webhooks of its organization.
Every process keeps its own count: each of them has senders free.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from speechbatch.adapters import metrics
from speechbatch.adapters.repositories.deliveries import ClaimedDelivery, DeliveryRules
from speechbatch.adapters.uow import RunUnit
from speechbatch.adapters.webhook_http import AttemptResult
from speechbatch.domain.webhooks import next_wait, sign
from speechbatch.runner.transactions import Transactions

log = logging.getLogger(__name__)

SENDER_THREADS = 10
# A lease longer than one POST can last (its deadline, from connect to the answer's last
# byte) plus the two short transactions, so a delivery has one attempt in flight.
LEASE_MARGIN_SECONDS = 20.0
# What may come between a claim and its POST's own deadline: the claim's commit, the
# address's lookup (DeliveryRules.attempt_seconds is the timeout plus this).
ATTEMPT_MARGIN_SECONDS = 2.0
GAUGE_INTERVAL_SECONDS = 5.0
# An idle sender that is not the one looking waits this many pauses at most, unless a
# sender finds work first: ten threads looking every pause were three quarters of an
# idle server's CPU.
FOLLOWER_PAUSES = 10


class Poster(Protocol):
    """What a sender thread POSTs through (``adapters.webhook_http.WebhookHTTP``)."""

    def post(self, url: str, headers: dict[str, str], body: bytes) -> AttemptResult: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class Full:
    """Who holds their share of this process's senders (a sender claims none of theirs)."""

    organizations: list[int]
    webhooks: list[int]


class SenderShares:
    """How many of this process's senders each organization and each webhook holds, and
    which hold their share. An organization's is ``threads // (organizations holding any
    + 1)``, at least one: the ``+ 1`` keeps a share free for an organization that is not
    sending yet. A webhook's is one less than its organization's, at least one: the one
    left keeps a sender for another webhook of the same organization."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._by_organization: Counter[int] = Counter()
        self._by_webhook: Counter[int] = Counter()
        self._lock = threading.Lock()

    def full(self) -> Full:
        """The organizations and the webhooks that hold their share."""
        with self._lock:
            share = max(1, self._threads // (len(self._by_organization) + 1))
            webhook_share = max(1, share - 1)
            return Full(
                [org for org, held in self._by_organization.items() if held >= share],
                [hook for hook, held in self._by_webhook.items() if held >= webhook_share],
            )

    def take(self, organization_id: int, webhook_id: int) -> None:
        """Count one more sender as the organization's and its webhook's."""
        with self._lock:
            self._by_organization[organization_id] += 1
            self._by_webhook[webhook_id] += 1

    def give_back(self, organization_id: int, webhook_id: int) -> None:
        """Count one sender less as the organization's and its webhook's."""
        with self._lock:
            # ``-=`` drops a count that reaches zero: the organizations counted are those
            # holding any.
            self._by_organization -= Counter({organization_id: 1})
            self._by_webhook -= Counter({webhook_id: 1})


@dataclass(frozen=True)
class Sent:
    """An attempt made whose result is not recorded yet."""

    claim: ClaimedDelivery
    result: AttemptResult


class DeliverySenders:
    """The sender threads of this process (started once, daemon threads)."""

    def __init__(
        self,
        tx: Transactions,
        make_poster: Callable[[], Poster],
        schedule: Sequence[float],
        worker_id: Callable[[], int],
        rules: DeliveryRules,
        *,
        threads: int = SENDER_THREADS,
        idle_seconds: float = 0.5,
        join_seconds: float = 12.0,
    ) -> None:
        self._tx = tx
        self._make_poster = make_poster
        self._schedule = tuple(schedule)
        self._worker_id = worker_id
        self.rules = rules
        self._threads = threads
        self.shares = SenderShares(threads)
        # One claim at a time in this process, so that shares are read and taken together.
        self._claiming = threading.Lock()
        self._idle = idle_seconds
        # While nothing is due, one sender at a time looks (holding ``_looking`` through
        # its pause); the others wait on ``_found``, set as soon as a sender claims a
        # delivery (before its POST, which may hang).
        self._looking = threading.Lock()
        self._found = threading.Event()
        self._stop = threading.Event()
        self._started: list[threading.Thread] = []
        self._join_seconds = join_seconds

    def start(self) -> None:
        """Start the sender threads (once); the first also keeps the gauge up to date."""
        if self._started:
            return
        for n in range(self._threads):
            thread = threading.Thread(
                target=self._loop, args=(n == 0,), name=f"speechbatch-webhook-{n}", daemon=True
            )
            self._started.append(thread)
            thread.start()

    def stop(self) -> None:
        """Claim nothing more, and wait (a little longer than one POST may last) for the
        attempts under way to record their results: a process that stops then closes
        its connections with no transaction of theirs open."""
        self._stop.set()
        self._found.set()
        deadline = time.monotonic() + self._join_seconds
        for thread in self._started:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _loop(self, keeps_gauge: bool) -> None:
        poster = self._make_poster()
        gauge_due = time.monotonic()
        sent: Sent | None = None
        try:
            while not self._stop.is_set():
                try:
                    if keeps_gauge and time.monotonic() >= gauge_due:
                        gauge_due = time.monotonic() + GAUGE_INTERVAL_SECONDS
                        self.update_gauge()
                    sent = self.deliver_one(poster, sent)
                except Exception:
                    # The last attempt's result stays with this thread until it is written:
                    # forgotten, its delivery would stay PENDING and go out again once its
                    # lease ran out, though it may have been delivered.
                    log.exception("webhook sender failed; trying again shortly")
                    sent = self._record_alone(sent)
                    self._stop.wait(self._idle)
                    continue
                if sent is None:
                    self._wait_for_work()
        finally:
            if sent is not None:
                self._tx(lambda uow: self._record(uow, sent))
            poster.close()

    def _wait_for_work(self) -> None:
        """Nothing was due: one idle sender waits a pause and looks again, the others
        until a sender finds work (or ``FOLLOWER_PAUSES`` pauses)."""
        self._found.clear()
        if self._looking.acquire(blocking=False):
            try:
                self._stop.wait(self._idle)
            finally:
                self._looking.release()
        else:
            self._found.wait(self._idle * FOLLOWER_PAUSES)

    def deliver_one(self, poster: Poster, previous: Sent | None = None) -> Sent | None:
        """Record ``previous`` (the last attempt's result) and claim the next due delivery
        in one transaction, then send it; what was sent (to record next time), or None
        when nothing was due."""
        worker = self._worker_id()

        def settle_and_claim(uow: RunUnit) -> ClaimedDelivery | None:
            if previous is not None:
                self._record(uow, previous)
            return uow.deliveries.claim_delivery(
                worker,
                self.rules,
                excluding_organizations=full.organizations,
                excluding_webhooks=full.webhooks,
            )

        with self._claiming:
            full = self.shares.full()
            claim = self._tx(settle_and_claim)
            if claim is None:
                return None
            self.shares.take(claim.organization_id, claim.webhook_id)
        self._found.set()  # the idle senders look too, while this one POSTs
        try:
            result = poster.post(claim.url, headers_for(claim), claim.body.encode())
        finally:
            self.shares.give_back(claim.organization_id, claim.webhook_id)
        return Sent(claim, result)

    def _record_alone(self, sent: Sent | None) -> Sent | None:
        """Write ``sent``'s result in a transaction of its own (the one it shared with the
        next claim failed); None once written, else ``sent`` to try again."""
        if sent is None:
            return None
        try:
            self._tx(lambda uow: self._record(uow, sent))
        except Exception:
            log.exception("webhook delivery=%s: its result is not written yet", sent.claim.id)
            return sent
        return None

    def _record(self, uow: RunUnit, sent: Sent) -> None:
        """Write an attempt's result, fenced by its claim (retry due, or FAILED)."""
        claim, result = sent.claim, sent.result
        retry_in = None
        if not result.delivered:
            retry_in = next_wait(self._schedule, claim.attempts - claim.schedule_from)
        won = uow.deliveries.finish_delivery(
            claim,
            delivered=result.delivered,
            status_code=result.status_code,
            error=result.error,
            retry_in=retry_in,
        )
        _count(claim, result, retry_in, won)

    def update_gauge(self) -> None:
        """Set the age of the oldest pending delivery (every GAUGE_INTERVAL_SECONDS)."""
        age = self._tx(lambda uow: uow.deliveries.oldest_pending_age())
        metrics.WEBHOOK_OLDEST_PENDING.set(age)


def headers_for(claim: ClaimedDelivery, now: float | None = None) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt (its own timestamp and signature)."""
    timestamp = int(time.time() if now is None else now)
    return {
        "Content-Type": "application/json",
        "User-Agent": "speechbatch-webhooks",
        "webhook-id": claim.message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(claim.secret, claim.message_id, timestamp, claim.body.encode()),
    }


def _count(
    claim: ClaimedDelivery, result: AttemptResult, retry_in: float | None, won: bool
) -> None:
    metrics.WEBHOOK_ATTEMPTS.labels(result=result.label).inc()
    outcome = "delivered" if result.delivered else "failed" if retry_in is None else "retrying"
    metrics.WEBHOOK_DELIVERIES.labels(outcome=outcome).inc()
    log.info(
        "webhook delivery=%s webhook=%s id=%s attempt=%s %s%s%s",
        claim.id,
        claim.webhook_id,
        claim.message_id,
        claim.attempts,
        outcome,
        f" ({result.error})" if result.error else "",
        "" if won else " (result not recorded: the claim was lost)",
    )
