"""A job's cover over HTTP: ``PUT /api/jobs/ID/cover`` (the image as the body, JPEG or
PNG) and ``GET`` of it. Authenticated like the rest of the API (``require_user``)."""

from __future__ import annotations

from flask import Blueprint, jsonify, request
from werkzeug.wrappers import Response

from speechbatch.services import books
from speechbatch.web.api import current, require_user
from speechbatch.web.context import services
from speechbatch.web.downloads import stored_file

bp = Blueprint("covers", __name__)


# One rule for both methods (as renders do): an id too large for the database must
# answer 404 for either, not 405.
@bp.route("/api/jobs/<int:job_id>/cover", methods=["GET", "PUT"])
@require_user
def cover(job_id: int) -> Response:
    """GET: the job's cover image (404 without one). PUT: a new cover, the image as the
    request's body (422 unless a JPEG or PNG within bounds)."""
    s = services()
    user = current()
    if request.method == "PUT":
        data = request.get_data(cache=False)
        mime = books.store_cover(s.uow_factory, s.storage, user.organization_id, job_id, data)
        return jsonify({"cover_url": f"/api/jobs/{job_id}/cover", "type": mime})
    key, mime = books.cover_file(s.uow_factory, user, job_id)
    return stored_file(
        s, key, mimetype=mime, download_name=f"cover.{key.rsplit('.', 1)[-1]}",
        missing="the cover's file is missing",
    )  # fmt: skip
