"""The ``/lexicon`` page: the organization's pronunciation rules as text (one a line),
"Check" (what the change would make stale, before anything is saved, counted in the
background and shown at ``/lexicon/check/<id>``), "Save", and a preview box. Forms
carry the hidden ``csrf_token`` field (checked by CSRFProtect)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, redirect, render_template, request, url_for

from speechbatch.domain.lexicon import LexiconError, Rule, lines_of, rules_from_lines
from speechbatch.errors import ValidationError
from speechbatch.services import lexicon as svc
from speechbatch.services import lexicon_impact as checks
from speechbatch.web.context import services
from speechbatch.web.pages import PageResponse, current, login_required

bp = Blueprint("lexicon", __name__)


def _page(status: int = 200, **shown: Any) -> PageResponse:
    state = svc.get_lexicon(services().uow_factory, current())
    shown.setdefault("rules_text", lines_of(Rule(**r) for r in state["rules"]))
    page = render_template("lexicon.html", lexicon=state, **shown)
    return (page, status) if status != 200 else page


@bp.get("/lexicon")
@login_required
def lexicon_page() -> PageResponse:
    """The rules, the state of the stale marks, and the preview box."""
    return _page()


@bp.post("/lexicon")
@login_required
def change_rules() -> PageResponse:
    """``action=check``: ask what the change would make stale (counted in the background,
    shown by ``check_page``); ``action=save``: save it."""
    text = request.form.get("rules", "")
    s = services()
    try:
        body = {"rules": rules_from_lines(text)}
        if request.form.get("action") != "save":
            asked = checks.request_impact(s.uow_factory, current(), body, s.limits.max_chars)
            if s.impact_passes is not None:
                s.impact_passes.nudge()
            return redirect(url_for("lexicon.check_page", impact_id=asked["id"]))
        # Read before the save: a finished check of these rules counted what it makes stale.
        checked = checks.checked_impact(s.uow_factory, current(), body)
        saved = svc.put_lexicon(s.uow_factory, current(), body)
    except (LexiconError, ValidationError) as exc:
        message = exc.message if isinstance(exc, ValidationError) else str(exc)
        return _page(422, rules_text=text, error=message)
    if s.stale_passes is not None:
        s.stale_passes.nudge()
    if checked is None:
        made = "the lines it changes are being marked stale"
    else:
        made = f"{_lines(checked)} became stale"
    flash(
        f"Saved as version {saved['version']}: {made}. "
        "Regenerate them from each job's page when you are ready.",
        "ok",
    )
    return redirect(url_for("lexicon.lexicon_page"))


@bp.get("/lexicon/check/<int:impact_id>")
@login_required
def check_page(impact_id: int) -> PageResponse:
    """A check's rules and its counts: while they are counted the page polls them
    (``static/impact-check.js``), or refreshes itself without JavaScript."""
    impact, rules = checks.impact_check(services().uow_factory, current(), impact_id)
    return _page(rules_text=lines_of(rules), impact=impact, checked=True)


def _lines(impact: dict[str, Any]) -> str:
    lines, jobs = impact["lines"], impact["jobs"]
    return f"{lines:,} line{'' if lines == 1 else 's'} in {jobs:,} job{'' if jobs == 1 else 's'}"


@bp.post("/lexicon/preview")
@login_required
def preview() -> PageResponse:
    """A sentence as the saved rules would have it spoken."""
    text = request.form.get("text", "")
    limit = services().limits.max_chars
    try:
        spoken = svc.preview(services().uow_factory, current(), {"text": text}, limit)
    except ValidationError as exc:
        return _page(422, preview_text=text, error=exc.message)
    return _page(preview_text=text, spoken_text=spoken["spoken_text"])


@bp.app_template_filter("stale_lines")
def stale_lines(impact: dict[str, Any]) -> str:
    """ "N lines in M jobs" for the page."""
    return _lines(impact)


@bp.app_template_filter("lines_read")
def lines_read(impact: dict[str, Any]) -> str:
    """ "C of T lines read" (or "C lines read" before the total is counted)."""
    checked, total = impact["checked"], impact["total"]
    return f"{checked:,} lines read" if total is None else f"{checked:,} of {total:,} lines read"
