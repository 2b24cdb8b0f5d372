"""Webhooks over the JSON API: endpoints, ping, the delivery log, redeliver.

Authenticated like the rest of the API (bearer token, or the browser session with an
``X-CSRFToken`` header on writes, checked by ``require_user``), so the app exempts the
blueprint from the form CSRF check.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from speechbatch.services import webhooks as svc
from speechbatch.web.api import current, json_body, require_user
from speechbatch.web.context import services

bp = Blueprint("webhooks_api", __name__)


@bp.post("/api/webhooks")
@require_user
def create_webhook() -> tuple[Response, int]:
    """Add a webhook; its signing secret is in this answer only."""
    return jsonify(svc.create_webhook(services().uow_factory, current(), json_body())), 201


@bp.get("/api/webhooks")
@require_user
def list_webhooks() -> Response:
    """The organization's webhooks, newest first, without secrets."""
    return jsonify({"webhooks": svc.list_webhooks(services().uow_factory, current())})


@bp.patch("/api/webhooks/<int:webhook_id>")
@require_user
def update_webhook(webhook_id: int) -> Response:
    """Change a webhook's url, events, description or enabled."""
    body = json_body()
    return jsonify(svc.update_webhook(services().uow_factory, current(), webhook_id, body))


@bp.delete("/api/webhooks/<int:webhook_id>")
@require_user
def delete_webhook(webhook_id: int) -> tuple[str, int]:
    """Delete a webhook; nothing more is sent to it."""
    svc.delete_webhook(services().uow_factory, current(), webhook_id)
    return "", 204


@bp.post("/api/webhooks/<int:webhook_id>/ping")
@require_user
def ping_webhook(webhook_id: int) -> tuple[Response, int]:
    """Send the webhook a ``ping`` event (delivered in the background)."""
    return jsonify(svc.ping(services().uow_factory, current(), webhook_id)), 202


@bp.get("/api/webhooks/<int:webhook_id>/deliveries")
@require_user
def list_deliveries(webhook_id: int) -> Response:
    """The webhook's deliveries, newest first."""
    deliveries = svc.list_deliveries(services().uow_factory, current(), webhook_id)
    return jsonify({"deliveries": deliveries})


@bp.post("/api/webhooks/<int:webhook_id>/deliveries/<int:delivery_id>/redeliver")
@require_user
def redeliver(webhook_id: int, delivery_id: int) -> tuple[Response, int]:
    """Send a delivery again, with the same ``webhook-id``."""
    svc.redeliver(services().uow_factory, current(), webhook_id, delivery_id)
    return jsonify({"id": delivery_id, "status": "PENDING"}), 202
