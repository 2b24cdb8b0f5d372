"""Exports over HTTP: the JSON API (``/api/exports``) and the admin page (``/exports``).

The API routes authenticate like the rest of the API (bearer token, or the browser
session with an ``X-CSRFToken`` header on writes, checked by ``require_user``), so the
app exempts ``create_export`` from the form CSRF check; the page's form POST is not
exempt and carries a hidden ``csrf_token`` field.
"""

from __future__ import annotations

from flask import (
    Blueprint,
    flash,
    jsonify,
    redirect,
    render_template,
    request,
    url_for,
)
from werkzeug.wrappers import Response

from speechbatch.errors import ExportInProgress
from speechbatch.services import exports as svc
from speechbatch.web.api import current, require_user
from speechbatch.web.context import services, session_user
from speechbatch.web.downloads import stored_file
from speechbatch.web.idempotency import held_key, idempotent

bp = Blueprint("exports", __name__)


@bp.post("/api/exports")
@require_user
@idempotent
def create_export() -> tuple[Response, int]:
    """Start an export of the organization's finished audio (409 while one is live; once
    per Idempotency-Key)."""
    s = services()
    view = svc.start_export(s.uow_factory, s.settings, s.builders, current(), held_key())
    return jsonify(view), 202


@bp.get("/api/exports/<int:export_id>")
@require_user
def get_export(export_id: int) -> Response:
    """One export, after lease-expiry recovery."""
    return jsonify(svc.get_export(services().uow_factory, current(), export_id))


@bp.get("/api/exports/<int:export_id>/download")
@require_user
def download_export(export_id: int) -> Response:
    """A COMPLETED export's ZIP; 404 until then."""
    s = services()
    key = svc.export_download_key(s.uow_factory, current(), export_id)
    return stored_file(
        s,
        key,
        mimetype="application/zip",
        as_attachment=True,
        download_name=f"speechbatch-export-{export_id}.zip",
        missing="the archive file is missing",
    )


@bp.get("/exports")
def exports_page() -> Response | str:
    """The organization's exports, newest first, with a button that starts a new one."""
    user = session_user()
    if user is None:
        return redirect(url_for("pages.login", next=request.path))
    exports = svc.list_exports(services().uow_factory, user)
    running = any(e["status"] == "RUNNING" for e in exports)
    return render_template("exports.html", exports=exports, running=running)


@bp.post("/exports")
def new_export() -> Response:
    """The "New export" form: start one, or say why not, and come back to the list."""
    user = session_user()
    if user is None:
        return redirect(url_for("pages.login"))
    s = services()
    try:
        view = svc.start_export(s.uow_factory, s.settings, s.builders, user)
    except ExportInProgress as exc:
        flash(exc.message, "error")
    else:
        flash(f"Export #{view['id']} started; this page shows when it is ready.", "ok")
    return redirect(url_for("exports.exports_page"))
