"""The pronunciation lexicon over HTTP: read and replace the organization's rules,
preview a text, and count what a change would make stale (a dry run). Routes
authenticate like the rest of the API (``require_user`` checks ``X-CSRFToken`` on
session writes), so the app exempts this blueprint from the form CSRF check."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from speechbatch.services import lexicon
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
def impact() -> Response:
    """How many DONE lines in how many jobs these rules would make stale (a dry run)."""
    s = services()
    return jsonify(lexicon.impact(s.uow_factory, current(), json_body(), s.limits.max_chars))
