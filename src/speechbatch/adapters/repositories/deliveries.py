"""Webhook deliveries: the claim of a due one, its result, the log, redeliver.

A sender claims a delivery by one compare-and-set under a lease (``claim_delivery``),
sends it with no transaction open, then writes the result fenced by the claim's token
(``finish_delivery``). A delivery is claimable while PENDING, due, its webhook enabled,
not of an organization or a webhook the sender leaves out (one that holds its share of
the process's senders), and not held: no lease, or its lease ran out, or its sender's
process stopped heartbeating and its attempt can no longer be in flight (so a delivery
whose process died goes out again within WORKER_DEAD_SECONDS, but a process that only
stopped heartbeating never sees its attempt sent a second time beside it). All the
arithmetic is on the database's clock.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import ColumnElement, Table, and_, bindparam, func, not_, or_, select, update
from sqlalchemy.orm import Session

from speechbatch.adapters.db import ago, db_now, later
from speechbatch.adapters.repositories.tables import workers
from speechbatch.adapters.repositories.webhooks import (
    webhook_deliveries,
    webhook_events,
    webhooks,
)
from speechbatch.domain.webhooks import DeliveryStatus

deliveries = webhook_deliveries


@dataclass(frozen=True)
class ClaimedDelivery:
    """A delivery this sender holds: what to POST, where, signed with what, and the
    token that fences its result."""

    id: int
    token: int
    attempts: int
    schedule_from: int
    webhook_id: int
    organization_id: int
    url: str
    secret: str
    message_id: str
    body: str


@dataclass(frozen=True)
class DeliveryRules:
    """What counts as a held delivery, and how many one webhook may have in flight (so a
    receiver that hangs holds a few senders, never all of them)."""

    lease_seconds: float
    worker_dead_seconds: float
    # The longest an attempt may be in flight after its claim: the POST's deadline and
    # what comes before it (the claim's commit, the address's lookup).
    attempt_seconds: float
    in_flight_per_webhook: int = 8


def _held(d: Table | Any, rules: DeliveryRules) -> ColumnElement[bool]:
    """The delivery row ``d`` is held: its lease runs, and its sender's process heartbeats
    or its attempt may still be in flight (the claim was made less than
    ``attempt_seconds`` ago: its lease ends more than ``lease_seconds - attempt_seconds``
    from now). A stale heartbeat says a process is dead or cut off from the database, not
    that it stopped sending."""
    return and_(
        d.c.lease_expires_at.is_not(None),
        d.c.lease_expires_at > db_now(),
        or_(
            d.c.lease_expires_at > later(rules.lease_seconds - rules.attempt_seconds),
            d.c.claimed_by_id.in_(
                select(workers.c.id).where(
                    workers.c.stopped_at.is_(None),
                    workers.c.heartbeat_at >= ago(rules.worker_dead_seconds),
                )
            ),
        ),
    )


def _busy_webhooks(rules: DeliveryRules) -> Any:
    """The webhooks with ``in_flight_per_webhook`` deliveries held already: one
    uncorrelated subquery (over the few leased rows, by their index), not one per row."""
    held = deliveries.alias("held")
    return (
        select(held.c.webhook_id)
        .where(held.c.status == DeliveryStatus.PENDING, _held(held, rules))
        .group_by(held.c.webhook_id)
        .having(func.count() >= rules.in_flight_per_webhook)
    )


def _claimable(d: Table | Any, rules: DeliveryRules) -> ColumnElement[bool]:
    return and_(
        d.c.status == DeliveryStatus.PENDING,
        d.c.next_attempt_at <= db_now(),
        not_(_held(d, rules)),
        d.c.webhook_id.in_(
            select(webhooks.c.id).where(
                webhooks.c.enabled.is_(True),
                webhooks.c.organization_id.not_in(
                    bindparam("excluded_organizations", expanding=True)
                ),
            )
        ),
        d.c.webhook_id.not_in(bindparam("excluded_webhooks", expanding=True)),
        d.c.webhook_id.not_in(_busy_webhooks(rules)),
    )


@functools.cache
def _claim_statement(rules: DeliveryRules) -> Any:
    """The claim's UPDATE for these rules, built once (building it costs more than
    running it); its parameters are the claiming worker and the organizations and
    webhooks left out."""
    d = deliveries.alias("d")
    candidate = (
        select(d.c.id)
        .where(_claimable(d, rules))
        .order_by(d.c.next_attempt_at, d.c.id)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    return (
        update(deliveries)
        # The guard again on the row itself: it is re-checked on the newest version.
        .where(deliveries.c.id == candidate, _claimable(deliveries, rules))
        .values(
            claim_token=deliveries.c.claim_token + 1,
            attempts=deliveries.c.attempts + 1,
            claimed_by_id=bindparam("worker_id"),
            lease_expires_at=later(rules.lease_seconds),
        )
        .returning(
            deliveries.c.id,
            deliveries.c.claim_token,
            deliveries.c.attempts,
            deliveries.c.schedule_from,
            deliveries.c.webhook_id,
            _of_webhook(webhooks.c.organization_id).label("organization_id"),
            _of_webhook(webhooks.c.url).label("url"),
            _of_webhook(webhooks.c.secret).label("secret"),
            _of_event(webhook_events.c.message_id).label("message_id"),
            _of_event(webhook_events.c.body).label("body"),
        )
    )


def _of_webhook(column: Any) -> Any:
    """A column of the claimed delivery's webhook, for the claim's RETURNING."""
    return select(column).where(webhooks.c.id == deliveries.c.webhook_id).scalar_subquery()


def _of_event(column: Any) -> Any:
    """A column of the claimed delivery's event, for the claim's RETURNING."""
    return select(column).where(webhook_events.c.id == deliveries.c.event_id).scalar_subquery()


def _view(row: Any) -> dict[str, Any]:
    def iso(moment: datetime | None) -> str | None:
        return moment.isoformat() if moment is not None else None

    return {
        "id": row.id,
        "event_id": row.message_id,
        "type": row.type,
        "status": row.status,
        "attempts": row.attempts,
        "last_status_code": row.last_status_code,
        "last_error": row.last_error,
        "next_attempt_at": iso(row.next_attempt_at),
        "delivered_at": iso(row.delivered_at),
        "created_at": iso(row.created_at),
    }


class Deliveries(Protocol):
    """What the webhook services need of deliveries: the log and redeliver."""

    def list_deliveries(self, webhook_id: int, *, limit: int = 100) -> list[dict[str, Any]]: ...
    def redeliver(self, delivery_id: int, webhook_id: int) -> bool: ...


class DeliveriesRepository:
    """Claims, results, the log and redeliver of webhook deliveries, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def claim_delivery(
        self,
        worker_id: int,
        rules: DeliveryRules,
        *,
        excluding_organizations: Sequence[int] = (),
        excluding_webhooks: Sequence[int] = (),
    ) -> ClaimedDelivery | None:
        """Compare-and-set: hold the oldest due delivery of any organization and webhook
        but those excluded for ``rules.lease_seconds`` as ``worker_id`` (one more attempt,
        a new token); None when none is claimable."""
        parameters = {
            "worker_id": worker_id,
            "excluded_organizations": list(excluding_organizations),
            "excluded_webhooks": list(excluding_webhooks),
        }
        row = self.session.execute(_claim_statement(rules), parameters).first()
        if row is None:
            return None
        return ClaimedDelivery(
            id=row.id,
            token=row.claim_token,
            attempts=row.attempts,
            schedule_from=row.schedule_from,
            webhook_id=row.webhook_id,
            organization_id=row.organization_id,
            url=row.url,
            secret=row.secret,
            message_id=row.message_id,
            body=row.body,
        )

    def finish_delivery(
        self,
        claim: ClaimedDelivery,
        *,
        delivered: bool,
        status_code: int | None,
        error: str | None,
        retry_in: float | None,
    ) -> bool:
        """Fenced by the claim's token: record an attempt's result and let the delivery
        go. Delivered; or not, then due again in ``retry_in`` seconds, or FAILED when
        that is None. False when the claim was lost (recovered by another sender)."""
        values: dict[str, Any] = {
            "lease_expires_at": None,
            "last_status_code": status_code,
            "last_error": error,
        }
        if delivered:
            values.update(status=DeliveryStatus.DELIVERED, delivered_at=db_now())
            values["next_attempt_at"] = None
        elif retry_in is None:
            values.update(status=DeliveryStatus.FAILED, next_attempt_at=None)
        else:
            values["next_attempt_at"] = later(retry_in)
        row = self.session.execute(
            update(deliveries)
            .where(
                deliveries.c.id == claim.id,
                deliveries.c.claim_token == claim.token,
                deliveries.c.status == DeliveryStatus.PENDING,
            )
            .values(**values)
            .returning(deliveries.c.id)
        ).first()
        return row is not None

    def list_deliveries(self, webhook_id: int, *, limit: int = 100) -> list[dict[str, Any]]:
        """A webhook's deliveries as the API shows them, newest first."""
        rows = self.session.execute(
            select(deliveries, webhook_events.c.message_id, webhook_events.c.type)
            .join(webhook_events, webhook_events.c.id == deliveries.c.event_id)
            .where(deliveries.c.webhook_id == webhook_id)
            .order_by(deliveries.c.id.desc())
            .limit(limit)
        ).all()
        return [_view(r) for r in rows]

    def redeliver(self, delivery_id: int, webhook_id: int) -> bool:
        """Make a delivery due now with a fresh retry schedule (same event, same
        ``webhook-id``); whether it exists. A delivery in flight keeps its attempt."""
        row = self.session.execute(
            update(deliveries)
            .where(deliveries.c.id == delivery_id, deliveries.c.webhook_id == webhook_id)
            .values(
                status=DeliveryStatus.PENDING,
                next_attempt_at=db_now(),
                schedule_from=deliveries.c.attempts,
                delivered_at=None,
            )
            .returning(deliveries.c.id)
        ).first()
        return row is not None

    def oldest_pending_age(self) -> float:
        """Seconds since the oldest PENDING delivery of an enabled webhook was created
        (0 when there is none), on the database's clock."""
        row = self.session.execute(
            select(func.min(deliveries.c.created_at).label("oldest"), db_now().label("now")).where(
                deliveries.c.status == DeliveryStatus.PENDING,
                deliveries.c.webhook_id.in_(
                    select(webhooks.c.id).where(webhooks.c.enabled.is_(True))
                ),
            )
        ).one()
        if row.oldest is None:
            return 0.0
        return max(0.0, (row.now - row.oldest).total_seconds())

    def pending_count(self) -> int:
        """How many deliveries are PENDING (benchmarks and tests wait on it)."""
        return self.session.execute(
            select(func.count()).where(deliveries.c.status == DeliveryStatus.PENDING)
        ).scalar_one()


__all__ = ["ClaimedDelivery", "Deliveries", "DeliveriesRepository", "DeliveryRules"]
