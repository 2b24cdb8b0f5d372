"""Editing over HTTP: an item's text, its takes, the job's voice and options, deleting
the job. Routes authenticate like the rest of the API (``require_user`` checks
``X-CSRFToken`` on session writes), so the app exempts this blueprint from the form
CSRF check."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify
from werkzeug.wrappers import Response as WerkzeugResponse

from speechbatch import services as svc
from speechbatch.services import editing
from speechbatch.services import timing as timing_service
from speechbatch.web.api import current, json_body, require_user, send_audio
from speechbatch.web.context import services

bp = Blueprint("editing_api", __name__)


def _job(job_id: int) -> Response:
    s = services()
    return jsonify(svc.get_job(s.uow_factory, s.settings, current(), job_id))


@bp.patch("/api/jobs/<int:job_id>/items/<int:item_id>")
@require_user
def edit_item(job_id: int, item_id: int) -> Response:
    """Give an item a new text: PENDING, its audio kept and stale (409 during a run)."""
    s = services()
    body = json_body()
    editing.edit_item(s.uow_factory, current(), job_id, item_id, body.get("text"), s.limits)
    return _job(job_id)


@bp.patch("/api/jobs/<int:job_id>")
@require_user
def update_job(job_id: int) -> Response:
    """Change the job's voice and/or options; its items with audio become stale."""
    s = services()
    editing.update_job(s.uow_factory, current(), job_id, json_body(), s.limits)
    return _job(job_id)


@bp.delete("/api/jobs/<int:job_id>")
@require_user
def delete_job(job_id: int) -> tuple[str, int]:
    """Delete a job that is not running (409 during a run)."""
    s = services()
    editing.delete_job(s.uow_factory, s.storage, current(), job_id)
    return "", 204


@bp.get("/api/jobs/<int:job_id>/items/<int:item_id>/takes")
@require_user
def takes(job_id: int, item_id: int) -> Response:
    """The item's kept takes, newest first."""
    s = services()
    return jsonify(
        editing.item_takes(s.uow_factory, current(), job_id, item_id, s.settings.takes_kept)
    )


@bp.get("/api/jobs/<int:job_id>/items/<int:item_id>/timing")
@require_user
def timing(job_id: int, item_id: int) -> Response:
    """Where each sentence (and word, where known) of the item's current take is spoken."""
    return jsonify(timing_service.item_timing(services().uow_factory, current(), job_id, item_id))


@bp.post("/api/jobs/<int:job_id>/items/<int:item_id>/takes/<int:take>/restore")
@require_user
def restore(job_id: int, item_id: int, take: int) -> Response:
    """Make a kept take the item's audio again, without a provider call."""
    s = services()
    editing.restore_take(
        s.uow_factory, s.storage, current(), job_id, item_id, take,
        s.settings.takes_kept, s.limits.max_chars,
    )  # fmt: skip
    return _job(job_id)


@bp.get("/api/jobs/<int:job_id>/items/<int:item_id>/takes/<int:take>/audio")
@require_user
def take_audio(job_id: int, item_id: int, take: int) -> WerkzeugResponse:
    """One kept take's audio bytes."""
    s = services()
    key = editing.take_audio_key(
        s.uow_factory, current(), job_id, item_id, take, s.settings.takes_kept
    )
    return send_audio(key, f"job{job_id}-item{item_id}-take{take}")
