"""Renders over HTTP: the JSON API (``/api/jobs/ID/renders``) and the job page's form.

The API routes authenticate like the rest of the API (``require_user``: a bearer token,
or the browser session with an ``X-CSRFToken`` header on writes), so the app exempts
``job_renders`` from the form CSRF check; the page's form POST is not exempt and
carries a hidden ``csrf_token`` field.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, jsonify, redirect, request, url_for
from werkzeug.wrappers import Response

from speechbatch.errors import Conflict, NotFound, ValidationError
from speechbatch.services import renders as svc
from speechbatch.web.api import current, json_body, require_user
from speechbatch.web.context import services, session_user
from speechbatch.web.downloads import stored_file
from speechbatch.web.idempotency import held_key, idempotent

bp = Blueprint("renders", __name__)


# One rule for both methods: with two, an id too large for the database would fail the
# GET rule's converter and then match the POST rule's path, answering 405 instead of 404.
@bp.route("/api/jobs/<int:job_id>/renders", methods=["GET", "POST"])
@require_user
@idempotent
def job_renders(job_id: int) -> Response | tuple[Response, int]:
    """GET: a job's renders, newest first, after lease-expiry recovery. POST: start a
    render of a finished job (409 unless complete, or while one runs; once per
    Idempotency-Key)."""
    s = services()
    if request.method == "GET":
        return jsonify({"renders": svc.list_renders(s.uow_factory, current(), job_id)})
    view = svc.start_render(
        s.uow_factory, s.settings, s.builders, current(), job_id, json_body(), held_key()
    )
    return jsonify(view), 202


@bp.get("/api/jobs/<int:job_id>/renders/<int:render_id>")
@require_user
def get_render(job_id: int, render_id: int) -> Response:
    """One render, after lease-expiry recovery."""
    return jsonify(svc.get_render(services().uow_factory, current(), job_id, render_id))


def _send(job_id: int, render_id: int, kind: str) -> Response:
    s = services()
    key, content_type, name = svc.render_file_key(s.uow_factory, current(), job_id, render_id, kind)
    return stored_file(
        s,
        key,
        mimetype=content_type,
        as_attachment=kind != "audio",
        download_name=name,
        missing="the render's file is missing",
    )


@bp.get("/api/jobs/<int:job_id>/renders/<int:render_id>/download")
@require_user
def download_render(job_id: int, render_id: int) -> Response:
    """A COMPLETED render's audio (ranges served, so players can seek); 404 until then."""
    return _send(job_id, render_id, "audio")


@bp.get("/api/jobs/<int:job_id>/renders/<int:render_id>/chapters.zip")
@require_user
def download_chapter_files(job_id: int, render_id: int) -> Response:
    """A COMPLETED render's chapter files (a ZIP: the acx preset's); 404 otherwise."""
    return _send(job_id, render_id, "zip")


@bp.get("/api/jobs/<int:job_id>/renders/<int:render_id>/captions.<kind>")
@require_user
def download_captions(job_id: int, render_id: int, kind: str) -> Response:
    """A COMPLETED render's captions, ``vtt`` (WebVTT) or ``srt`` (SubRip); 404 otherwise."""
    if kind not in svc.CAPTION_KINDS:
        raise NotFound("captions are .vtt or .srt")
    return _send(job_id, render_id, kind)


def _form_options() -> dict[str, Any]:
    """The page form's fields as the API's JSON body (numbers parsed, empty loudness null)."""
    form = request.form
    body: dict[str, Any] = {"format": form.get("format", "")}
    preset = form.get("preset", "").strip()
    if preset:
        body["preset"] = preset
    for name in ("gap_ms", "chapter_gap_ms", "paragraph_gap_ms"):
        if form.get(name, "").strip():
            body[name] = _number(form[name], name, int)
    loudness = form.get("loudness_lufs", "").strip()
    if not preset:
        body["loudness_lufs"] = (
            None if loudness in ("", "off") else _number(loudness, "loudness_lufs", float)
        )
    return body


def _number(raw: str, name: str, kind: type[int] | type[float]) -> int | float:
    try:
        return kind(raw)
    except ValueError:
        raise ValidationError(f"{name} must be a number", field=name) from None


@bp.post("/jobs/<int:job_id>/renders")
def new_render(job_id: int) -> Response:
    """The job page's Render form: start one, or say why not, and come back to the job."""
    user = session_user()
    if user is None:
        return redirect(url_for("pages.login"))
    s = services()
    try:
        body = _form_options()
        view = svc.start_render(s.uow_factory, s.settings, s.builders, user, job_id, body)
    except (Conflict, ValidationError) as exc:
        flash(exc.message, "error")
    else:
        flash(f"Render #{view['id']} ({view['format'].upper()}) started.", "ok")
    return redirect(url_for("pages.job", job_id=job_id, _anchor="renders"))
