"""The pronunciation lexicon over HTTP: read and replace the organization's rules,
preview a text, and ask what a change would make stale (a dry run counted in the
background, read by id). Routes authenticate like the rest of the API
(``require_user`` checks ``X-CSRFToken`` on session writes), so the app exempts this
blueprint from the form CSRF check."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, url_for

from speechbatch.services import lexicon, lexicon_impact
from speechbatch.web.api import current, json_body, require_user
from speechbatch.web.context import services

bp = Blueprint("lexicon_api", __name__)


@bp.get("/api/lexicon")
@require_user
def get_lexicon() -> Response:
    """The organization's rules, their version and the stale pass's state."""
    return jsonify(lexicon.get_lexicon(services().uow_factory, current()))


@bp.put("/api/lexicon")
@require_user
def put_lexicon() -> Response:
    """Replace the rules (422 ``invalid_rule`` changes nothing); the stale marks follow."""
    s = services()
    answer = lexicon.put_lexicon(s.uow_factory, current(), json_body())
    if s.stale_passes is not None:
        s.stale_passes.nudge()
    return jsonify(answer)


@bp.post("/api/lexicon/preview")
@require_user
def preview() -> Response:
    """A text as the organization's rules would have it spoken."""
    s = services()
    return jsonify(lexicon.preview(s.uow_factory, current(), json_body(), s.limits.max_chars))


@bp.post("/api/lexicon/impact")
@require_user
def request_impact() -> tuple[Response, int, dict[str, str]]:
    """Ask what these rules would make stale (a dry run, counted in the background):
    202 with the request's id and the URL to read its counts at (also ``Location``)."""
    s = services()
    asked = lexicon_impact.request_impact(s.uow_factory, current(), json_body(), s.limits.max_chars)
    if s.impact_passes is not None:
        s.impact_passes.nudge()
    url = url_for("lexicon_api.impact", impact_id=asked["id"])
    return jsonify({**asked, "url": url}), 202, {"Location": url}


@bp.get("/api/lexicon/impact/<int:impact_id>")
@require_user
def impact(impact_id: int) -> Response:
    """A dry run's counts so far and whether it is complete."""
    return jsonify(lexicon_impact.impact_state(services().uow_factory, current(), impact_id))
