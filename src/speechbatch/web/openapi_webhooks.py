"""The webhooks' part of the OpenAPI document (schemas and paths), with openapi.py's
helpers; openapi.py's ``document`` imports it when it builds the document."""

from __future__ import annotations

from typing import Any

from speechbatch.domain.statuses import values
from speechbatch.domain.webhooks import (
    DESCRIPTION_PATTERN,
    EVENT_TYPES,
    MAX_DESCRIPTION_LENGTH,
    MAX_URL_LENGTH,
    URL_PATTERN,
    DeliveryStatus,
)
from speechbatch.web.openapi import (
    ID,
    TIMESTAMP,
    _errors,
    _json,
    _nullable,
    _obj,
    _operation,
    _path_id,
    _ref,
)

URL = {"type": "string", "maxLength": MAX_URL_LENGTH, "pattern": URL_PATTERN}
EVENTS = {"type": "array", "minItems": 1, "items": {"enum": list(EVENT_TYPES)}}
DESCRIPTION = {
    "type": "string",
    "maxLength": MAX_DESCRIPTION_LENGTH,
    "pattern": DESCRIPTION_PATTERN,
}


WEBHOOK_FIELDS = {
    "id": ID,
    "url": {"type": "string"},
    "events": {"type": "array", "items": {"enum": list(EVENT_TYPES)}},
    "description": {"type": "string"},
    "enabled": {"type": "boolean"},
    "created_at": TIMESTAMP,
}

WEBHOOK_SCHEMAS: dict[str, Any] = {
    "Webhook": _obj(WEBHOOK_FIELDS),
    "NewWebhook": _obj({**WEBHOOK_FIELDS, "secret": {"type": "string", "pattern": "^whsec_"}}),
    "WebhookList": _obj({"webhooks": {"type": "array", "items": _ref("Webhook")}}),
    "WebhookRequest": _obj({"url": URL, "events": EVENTS}, {"description": DESCRIPTION}),
    "WebhookChange": {
        "type": "object",
        "properties": {
            "url": URL,
            "events": EVENTS,
            "description": DESCRIPTION,
            "enabled": {"type": "boolean"},
        },
        "additionalProperties": False,
    },
    "Delivery": _obj(
        {
            "id": ID,
            "event_id": {"type": "string"},
            "type": {"enum": list(EVENT_TYPES)},
            "status": {"enum": values(DeliveryStatus)},
            "attempts": {"type": "integer", "minimum": 0},
            "last_status_code": _nullable({"type": "integer"}),
            "last_error": _nullable({"type": "string"}),
            "next_attempt_at": _nullable(TIMESTAMP),
            "delivered_at": _nullable(TIMESTAMP),
            "created_at": TIMESTAMP,
        }
    ),
    "DeliveryList": _obj({"deliveries": {"type": "array", "items": _ref("Delivery")}}),
    "Ping": _obj({"event_id": {"type": "string"}}),
    "Redelivery": _obj({"id": ID, "status": {"enum": ["PENDING"]}}),
}


def webhook_paths() -> dict[str, dict[str, Any]]:
    """The webhook calls."""
    webhook_id = _path_id("webhook_id", "webhook")
    links = {"updateWebhook": "webhook_id", "pingWebhook": "webhook_id",
             "listDeliveries": "webhook_id"}  # fmt: skip
    return {
        "/api/webhooks": {
            "get": _operation(
                "listWebhooks",
                "The organization's webhooks, newest first, without secrets.",
                {"200": _json("WebhookList", "The webhooks."), **_errors(401)},
            ),
            "post": _operation(
                "createWebhook",
                "Add a webhook; its signing secret (whsec_…) is in this answer only.",
                {
                    "201": _json("NewWebhook", "The webhook, with its secret.", links=links),
                    **_errors(400, 401, 413, 422),
                },
                body="WebhookRequest",
            ),
        },
        "/api/webhooks/{webhook_id}": {
            "parameters": [webhook_id],
            "patch": _operation(
                "updateWebhook",
                "Change a webhook's url, events, description or enabled.",
                {"200": _json("Webhook", "The webhook."), **_errors(400, 401, 404, 413, 422)},
                body="WebhookChange",
            ),
            "delete": _operation(
                "deleteWebhook",
                "Delete a webhook and its deliveries.",
                {"204": {"description": "Deleted."}, **_errors(400, 401, 404)},
            ),
        },
        **_delivery_paths(webhook_id),
    }


def _delivery_paths(webhook_id: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Ping, the delivery log and redeliver."""
    return {
        "/api/webhooks/{webhook_id}/ping": {
            "parameters": [webhook_id],
            "post": _operation(
                "pingWebhook",
                "Send the webhook a ping event (delivered in the background).",
                {
                    "202": _json("Ping", "The ping's event id (its webhook-id)."),
                    **_errors(400, 401, 404),
                },
            ),
        },
        "/api/webhooks/{webhook_id}/deliveries": {
            "parameters": [webhook_id],
            "get": _operation(
                "listDeliveries",
                "The webhook's deliveries, newest first.",
                {"200": _json("DeliveryList", "The deliveries."), **_errors(401, 404)},
            ),
        },
        "/api/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver": {
            "parameters": [webhook_id, _path_id("delivery_id", "delivery")],
            "post": _operation(
                "redeliverDelivery",
                "Send a delivery again, with the same webhook-id.",
                {"202": _json("Redelivery", "It is due now."), **_errors(400, 401, 404)},
            ),
        },
    }
