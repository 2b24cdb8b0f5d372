"""The ``/webhooks`` admin page: add a webhook (its secret shown once), enable, disable,
ping or delete one, and look at its deliveries and send one again. Every form carries
a hidden ``csrf_token`` field (checked by CSRFProtect)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from speechbatch.domain.webhooks import EVENT_TYPES
from speechbatch.errors import NotFound, ValidationError
from speechbatch.services import webhooks as svc
from speechbatch.web.context import services
from speechbatch.web.pages import PageResponse, current, login_required

bp = Blueprint("webhooks", __name__)
SUBSCRIBABLE = tuple(t for t in EVENT_TYPES if t != "ping")


def _list_page(created: dict[str, Any] | None = None, error: str | None = None) -> PageResponse:
    hooks = svc.list_webhooks(services().uow_factory, current())
    page = render_template(
        "webhooks.html", webhooks=hooks, created=created, error=error, event_types=SUBSCRIBABLE
    )
    return (page, 422) if error else page


@bp.get("/webhooks")
@login_required
def webhooks_page() -> PageResponse:
    """The organization's webhooks, with a form that adds one."""
    return _list_page()


@bp.post("/webhooks")
@login_required
def create_webhook() -> PageResponse:
    """Add a webhook and show its secret on this answer only."""
    body = {
        "url": request.form.get("url", ""),
        "events": request.form.getlist("events"),
        "description": request.form.get("description", ""),
    }
    try:
        created = svc.create_webhook(services().uow_factory, current(), body)
    except ValidationError as exc:
        return _list_page(error=exc.message)
    return _list_page(created=created)


@bp.post("/webhooks/<int:webhook_id>/<any(enable, disable):action>")
@login_required
def switch_webhook(webhook_id: int, action: str) -> Response:
    """Enable or disable a webhook (a disabled one gets nothing until enabled)."""
    svc.update_webhook(
        services().uow_factory, current(), webhook_id, {"enabled": action == "enable"}
    )
    flash(f"Webhook {action}d.", "ok")
    if request.form.get("back") == "detail":
        return redirect(url_for("webhooks.webhook_page", webhook_id=webhook_id))
    return redirect(url_for("webhooks.webhooks_page"))


@bp.post("/webhooks/<int:webhook_id>/delete")
@login_required
def delete_webhook(webhook_id: int) -> Response:
    """Delete a webhook and its deliveries."""
    try:
        svc.delete_webhook(services().uow_factory, current(), webhook_id)
    except NotFound:
        flash("That webhook does not exist.", "error")
    else:
        flash("Webhook deleted.", "ok")
    return redirect(url_for("webhooks.webhooks_page"))


@bp.post("/webhooks/<int:webhook_id>/ping")
@login_required
def ping_webhook(webhook_id: int) -> Response:
    """Send a ping event; its delivery shows on the webhook's page."""
    svc.ping(services().uow_factory, current(), webhook_id)
    flash("Ping sent: its delivery is listed below.", "ok")
    return redirect(url_for("webhooks.webhook_page", webhook_id=webhook_id))


@bp.get("/webhooks/<int:webhook_id>")
@login_required
def webhook_page(webhook_id: int) -> PageResponse:
    """One webhook and its deliveries, newest first."""
    uow_factory = services().uow_factory
    hook = svc.get_webhook(uow_factory, current(), webhook_id)
    deliveries = svc.list_deliveries(uow_factory, current(), webhook_id)
    return render_template("webhook.html", webhook=hook, deliveries=deliveries)


@bp.post("/webhooks/<int:webhook_id>/deliveries/<int:delivery_id>/redeliver")
@login_required
def redeliver(webhook_id: int, delivery_id: int) -> Response:
    """Send a delivery again, with the same webhook-id."""
    svc.redeliver(services().uow_factory, current(), webhook_id, delivery_id)
    flash(f"Delivery #{delivery_id} will be sent again.", "ok")
    return redirect(url_for("webhooks.webhook_page", webhook_id=webhook_id))
