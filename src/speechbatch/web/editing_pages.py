"""Fixing lines from the browser: an item's page (edit its text, listen to and restore
its takes), a regenerate of a selection or of the stale lines (its estimate first, then
a confirmation), and deleting a job. Every form carries ``csrf_token``."""

from __future__ import annotations

from flask import Blueprint, flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from speechbatch import services as svc
from speechbatch.errors import Conflict, NotFound, ValidationError
from speechbatch.services import editing, spending
from speechbatch.web.context import services
from speechbatch.web.pages import PageResponse, current, login_required
from speechbatch.web.usage import estimate_line

bp = Blueprint("editing_pages", __name__)

# The confirmation page lists this many of the chosen lines (a job page shows 100 a page).
LINES_SHOWN = 200


@bp.get("/jobs/<int:job_id>/items/<int:item_id>")
@login_required
def item(job_id: int, item_id: int) -> PageResponse:
    """One line: its text in an edit box, its takes with players and Restore."""
    s = services()
    view = editing.item_page(s.uow_factory, current(), job_id, item_id, s.settings.takes_kept)
    job = svc.get_job_summary(s.uow_factory, s.settings, current(), job_id)
    line = estimate_line(
        "Regenerate this line",
        spending.estimate(
            s.uow_factory, s.settings, s.provider, current(), job_id,
            selection=svc.Selection((item_id,)),
        ),
    )  # fmt: skip
    return render_template(
        "item.html", job=job, item=view["item"], takes=view["takes"], estimate=line,
        max_chars=s.limits.max_chars,
    )  # fmt: skip


@bp.post("/jobs/<int:job_id>/items/<int:item_id>/edit")
@login_required
def edit(job_id: int, item_id: int) -> Response:
    """Save a line's new text: it becomes pending with its audio kept, marked stale."""
    s = services()
    try:
        editing.edit_item(
            s.uow_factory, current(), job_id, item_id, request.form.get("text", ""), s.limits
        )
    except (Conflict, ValidationError) as exc:
        flash(exc.message, "error")
    else:
        flash("Saved. Generate sends only the edited lines.", "ok")
    return redirect(url_for("editing_pages.item", job_id=job_id, item_id=item_id))


@bp.post("/jobs/<int:job_id>/items/<int:item_id>/takes/<int:take>/restore")
@login_required
def restore(job_id: int, item_id: int, take: int) -> Response:
    """Make an earlier take current again (no provider call)."""
    s = services()
    try:
        editing.restore_take(
            s.uow_factory, s.storage, current(), job_id, item_id, take,
            s.settings.takes_kept, s.limits.max_chars,
        )  # fmt: skip
    except (Conflict, NotFound) as exc:
        flash(exc.message, "error")
    else:
        flash(f"Take {take} is current again; nothing was sent or billed.", "ok")
    return redirect(url_for("editing_pages.item", job_id=job_id, item_id=item_id))


def _selection() -> svc.Selection:
    """The lines a selection form or link names: ``items`` (repeated) or ``stale``."""
    ids = request.values.getlist("items")
    stale = request.values.get("stale") == "1"
    try:
        selection = svc.selection_of([int(i) for i in ids] or None, stale or None)
    except ValueError:
        raise ValidationError("items must be item ids", field="items") from None
    if selection is None:
        raise ValidationError("choose at least one line", field="items")
    return selection


@bp.get("/jobs/<int:job_id>/selection")
@login_required
def selection(job_id: int) -> PageResponse:
    """What regenerating the chosen lines (or every stale line) would send and cost,
    with the button that does it."""
    s = services()
    try:
        chosen = _selection()
    except ValidationError as exc:
        flash(exc.message, "error")
        return redirect(url_for("pages.job", job_id=job_id))
    job = svc.get_job_summary(s.uow_factory, s.settings, current(), job_id)
    est = spending.estimate(
        s.uow_factory, s.settings, s.provider, current(), job_id, selection=chosen
    )
    lines, named = editing.selection_lines(s.uow_factory, current(), job_id, chosen, LINES_SHOWN)
    return render_template(
        "selection.html", job=job, estimate=est, line=estimate_line("Regenerate", est),
        items=list(chosen.items or ()), stale=chosen.stale, lines=lines, named=named,
    )  # fmt: skip


@bp.post("/jobs/<int:job_id>/selection")
@login_required
def regenerate_selection(job_id: int) -> Response:
    """Regenerate the chosen lines (or every stale line) only."""
    s = services()
    try:
        view = svc.start_generation(
            s.uow_factory, s.settings, s.run_control, current(), job_id, selection=_selection()
        )
    except (Conflict, ValidationError) as exc:
        flash(exc.message, "error")
    else:
        flash(
            f"Regenerating {view['runs'][-1]['selected']} line(s) (run {view['attempt']}).",
            "started",
        )
    return redirect(url_for("pages.job", job_id=job_id))


def _settings_body() -> dict[str, object]:
    """The job settings form as the body ``PATCH /api/jobs/ID`` takes: the voice, and
    the options (a blank speed is the default; blank instructions are none)."""
    options: dict[str, object] = {"instructions": request.form.get("instructions", "")}
    speed = request.form.get("speed", "").strip()
    if speed:
        try:
            options["speed"] = float(speed)
        except ValueError:
            raise ValidationError("speed must be a number", field="options") from None
    return {"voice": request.form.get("voice", ""), "options": options}


@bp.post("/jobs/<int:job_id>/settings")
@login_required
def settings(job_id: int) -> Response:
    """Change the job's voice and options (not while it runs): its lines with audio
    become stale, and nothing is sent until someone asks."""
    s = services()
    try:
        changed = editing.update_job(s.uow_factory, current(), job_id, _settings_body(), s.limits)
    except (Conflict, ValidationError) as exc:
        flash(exc.message, "error")
    else:
        flash(
            "Voice and options saved: lines made before are stale until regenerated."
            if changed
            else "Nothing changed: the voice and options were already these.",
            "ok",
        )
    return redirect(url_for("pages.job", job_id=job_id))


@bp.post("/jobs/<int:job_id>/cast")
@login_required
def cast(job_id: int) -> Response:
    """Change one speaker's voice (the same change as ``PATCH /api/jobs/ID`` with a
    cast): exactly that speaker's lines with audio become stale; a blank voice gives the
    speaker back to the narrator's voice."""
    s = services()
    speaker, voice = request.form.get("speaker", ""), request.form.get("voice", "").strip()
    body = {"cast": {speaker: voice or None}}
    try:
        changed = editing.update_job(s.uow_factory, current(), job_id, body, s.limits)
    except (Conflict, ValidationError) as exc:
        flash(exc.message, "error")
    else:
        flash(
            f"{speaker.strip()}'s voice saved: their lines made before are stale until regenerated."
            if changed
            else f"Nothing changed: {speaker.strip()} already had that voice.",
            "ok",
        )
    return redirect(url_for("pages.job", job_id=job_id))


@bp.post("/jobs/<int:job_id>/delete")
@login_required
def delete(job_id: int) -> Response:
    """Delete the job (not while it runs)."""
    s = services()
    try:
        editing.delete_job(s.uow_factory, s.storage, current(), job_id)
    except Conflict as exc:
        flash(exc.message, "error")
        return redirect(url_for("pages.job", job_id=job_id))
    flash("Job deleted.", "ok")
    return redirect(url_for("pages.index"))
