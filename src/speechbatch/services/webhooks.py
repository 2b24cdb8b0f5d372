"""Webhooks: an organization's endpoints, ping, the delivery log and redeliver.

Events are recorded by the changes they report, in their own transactions, through
``uow.webhooks.record_event`` (see ``adapters/repositories/webhooks.py``); the sending
is background work (``runner/deliveries.py``). Another organization's webhook is a 404.
"""

from __future__ import annotations

import logging
from typing import Any

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.webhooks import WebhookRecord
from speechbatch.adapters.uow import UowFactory
from speechbatch.domain.webhooks import (
    EventType,
    check_description,
    check_events,
    check_url,
    new_secret,
)
from speechbatch.errors import NotFound, ValidationError

log = logging.getLogger(__name__)

WEBHOOK_NOT_FOUND = "webhook not found"
EDITABLE = ("url", "events", "description", "enabled")


def webhook_view(record: WebhookRecord, *, secret: bool = False) -> dict[str, Any]:
    """A webhook as the API shows it (its secret only when it was just created)."""
    view: dict[str, Any] = {
        "id": record.id,
        "url": record.url,
        "events": record.events,
        "description": record.description,
        "enabled": record.enabled,
        "created_at": record.created_at.isoformat(),
    }
    if secret:
        view["secret"] = record.secret
    return view


def create_webhook(
    uow_factory: UowFactory, user: UserRecord, body: dict[str, Any]
) -> dict[str, Any]:
    """Add an enabled webhook; the answer carries its signing secret this once."""
    url = check_url(body.get("url"))
    events = check_events(body.get("events"))
    description = check_description(body.get("description", ""))
    with uow_factory() as uow:
        record = uow.webhooks.create_webhook(
            user.organization_id, url, events, description, new_secret()
        )
        uow.commit()
    log.info("webhook created id=%s org=%s by=%s", record.id, user.organization_id, user.email)
    return webhook_view(record, secret=True)


def list_webhooks(uow_factory: UowFactory, user: UserRecord) -> list[dict[str, Any]]:
    """The organization's webhooks, newest first, without secrets."""
    with uow_factory(read_only=True) as uow:
        return [webhook_view(r) for r in uow.webhooks.list_webhooks(user.organization_id)]


def get_webhook(uow_factory: UowFactory, user: UserRecord, webhook_id: int) -> dict[str, Any]:
    """One of the organization's webhooks, without its secret."""
    with uow_factory(read_only=True) as uow:
        record = uow.webhooks.get_webhook(webhook_id, user.organization_id)
    if record is None:
        raise NotFound(WEBHOOK_NOT_FOUND)
    return webhook_view(record)


def update_webhook(
    uow_factory: UowFactory, user: UserRecord, webhook_id: int, body: dict[str, Any]
) -> dict[str, Any]:
    """Change a webhook's url, events, description or enabled; enabling it again lets
    the deliveries that waited go out."""
    values: dict[str, Any] = {}
    if "url" in body:
        values["url"] = check_url(body["url"])
    if "events" in body:
        values["events"] = check_events(body["events"])
    if "description" in body:
        values["description"] = check_description(body["description"])
    if "enabled" in body:
        if not isinstance(body["enabled"], bool):
            raise ValidationError("enabled must be true or false", field="enabled")
        values["enabled"] = body["enabled"]
    unknown = sorted(set(body) - set(EDITABLE))
    if unknown:
        raise ValidationError(f"unknown field(s): {', '.join(unknown)}")
    with uow_factory() as uow:
        record = uow.webhooks.update_webhook(webhook_id, user.organization_id, values)
        if record is None:
            raise NotFound(WEBHOOK_NOT_FOUND)
        uow.commit()
    log.info("webhook changed id=%s fields=%s", webhook_id, ",".join(sorted(values)))
    return webhook_view(record)


def delete_webhook(uow_factory: UowFactory, user: UserRecord, webhook_id: int) -> None:
    """Delete a webhook and its deliveries (none is sent after this commits)."""
    with uow_factory() as uow:
        if not uow.webhooks.delete_webhook(webhook_id, user.organization_id):
            raise NotFound(WEBHOOK_NOT_FOUND)
        uow.commit()
    log.info("webhook deleted id=%s", webhook_id)


def ping(uow_factory: UowFactory, user: UserRecord, webhook_id: int) -> dict[str, Any]:
    """Record a ``ping`` event for this one webhook; it is delivered like any other."""
    with uow_factory() as uow:
        record = uow.webhooks.get_webhook(webhook_id, user.organization_id)
        if record is None:
            raise NotFound(WEBHOOK_NOT_FOUND)
        message_id = uow.webhooks.record_event(
            user.organization_id,
            EventType.PING,
            {"webhook": webhook_view(record)},
            webhook_id=webhook_id,
        )
        uow.commit()
    return {"event_id": message_id}


def list_deliveries(
    uow_factory: UowFactory, user: UserRecord, webhook_id: int
) -> list[dict[str, Any]]:
    """A webhook's deliveries (the newest 100), newest first."""
    with uow_factory(read_only=True) as uow:
        if uow.webhooks.get_webhook(webhook_id, user.organization_id) is None:
            raise NotFound(WEBHOOK_NOT_FOUND)
        return uow.deliveries.list_deliveries(webhook_id)


def redeliver(uow_factory: UowFactory, user: UserRecord, webhook_id: int, delivery_id: int) -> None:
    """Send a delivery again (same event, same ``webhook-id``), with a fresh schedule."""
    with uow_factory() as uow:
        if uow.webhooks.get_webhook(webhook_id, user.organization_id) is None:
            raise NotFound(WEBHOOK_NOT_FOUND)
        if not uow.deliveries.redeliver(delivery_id, webhook_id):
            raise NotFound("delivery not found")
        uow.commit()
    log.info("webhook redeliver webhook=%s delivery=%s", webhook_id, delivery_id)
