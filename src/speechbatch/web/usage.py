"""Spending over HTTP: cancel, estimate and usage in the JSON API, the usage page, the
Cancel button, and the estimate lines shown next to the job page's buttons.

The API routes authenticate like the rest of the API (``require_user`` checks
``X-CSRFToken`` on session writes), so the app exempts ``cancel`` from the form CSRF
check; the page's Cancel form is not exempt and carries a hidden ``csrf_token`` field.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, jsonify, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from speechbatch import services as svc
from speechbatch.domain.statuses import JobStatus
from speechbatch.errors import NotGenerating
from speechbatch.services import spending
from speechbatch.web.api import current, flag_arg, require_user
from speechbatch.web.context import services
from speechbatch.web.pages import current as page_user
from speechbatch.web.pages import login_required

bp = Blueprint("spending", __name__)

CURRENCY_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}
# Voices made on this machine: nobody bills their characters.
OFFLINE_PROVIDERS = ("espeak", "piper")


@bp.post("/api/jobs/<int:job_id>/cancel")
@require_user
def cancel(job_id: int) -> Response:
    """End the job's live run at once (409 not_generating when there is none)."""
    s = services()
    spending.cancel_generation(s.uow_factory, s.run_control, current(), job_id)
    return jsonify(svc.get_job(s.uow_factory, s.settings, current(), job_id))


@bp.get("/api/jobs/<int:job_id>/estimate")
@require_user
def estimate(job_id: int) -> Response:
    """What Generate/Retry (or ``?regenerate=1``, Regenerate; ``?items=3,5,8`` or
    ``?stale=1``, a selection) would send and cost now."""
    s = services()
    regenerate = request.args.get("regenerate", "").strip().lower() in ("1", "true", "yes")
    selection = svc.selection_from_query(request.args.get("items"), flag_arg("stale"))
    return jsonify(
        spending.estimate(
            s.uow_factory,
            s.settings,
            s.provider,
            current(),
            job_id,
            regenerate=regenerate,
            selection=selection,
        )
    )


@bp.get("/api/usage")
@require_user
def usage() -> Response:
    """This month's billed characters and provider calls against the budget."""
    s = services()
    return jsonify(spending.usage_view(s.uow_factory, s.settings, current()))


def money(price: dict[str, Any] | None) -> str | None:
    """A price as people read it: ``$0.21``, ``0.21 CHF``; tiny amounts as ``<$0.01``."""
    if price is None:
        return None
    amount, currency = price["amount"], price["currency"]
    symbol = CURRENCY_SYMBOLS.get(currency)
    shown = "<0.01" if 0 < amount < 0.01 else f"{amount:,.2f}"
    if symbol:
        return f"<{symbol}0.01" if shown == "<0.01" else f"{symbol}{shown}"
    return f"{shown} {currency}"


def estimate_line(label: str, est: dict[str, Any]) -> str:
    """``Retry: 120 items, 14,300 characters, about $0.21; 30 will reuse audio``."""
    calls = est["items"]
    text = f"{label}: {calls:,} item{'s' if calls != 1 else ''}, {est['characters']:,} characters"
    cost = money(est["price"])
    if cost is not None:
        text += f", about {cost}"
    if est["reused_items"]:
        text += f"; {est['reused_items']:,} will reuse audio"
    if est.get("too_long_items"):
        text += (
            f"; {est['too_long_items']:,} will fail unsent: the lexicon makes them longer "
            "than an item may be"
        )
    if est.get("pending_items"):
        text += f"; {est['pending_items']:,} not counted yet: their lexicon pass is running"
    return text


def job_estimates(job: dict[str, Any]) -> dict[str, str]:
    """The estimate lines of the job page's buttons that can work now (by button)."""
    s = services()
    lines: dict[str, str] = {}
    if job["status"] == JobStatus.GENERATING:
        return lines
    not_done = job["progress"]["total"] - job["progress"]["done"]
    if not_done:
        label = "Retry" if job["status"] == JobStatus.FAILED else "Generate"
        est = spending.estimate(s.uow_factory, s.settings, s.provider, page_user(), job["id"])
        lines["generate"] = estimate_line(label, est)
    if job["status"] in (JobStatus.COMPLETED, JobStatus.FAILED):
        est = spending.estimate(
            s.uow_factory, s.settings, s.provider, page_user(), job["id"], regenerate=True
        )
        lines["regenerate"] = estimate_line("Regenerate every line", est)
    if stale := job["progress"].get("stale"):
        # Quoted apart from the full regenerate: the stale link sends only these lines.
        est = spending.estimate(
            s.uow_factory, s.settings, s.provider, page_user(), job["id"],
            selection=svc.Selection(None),
        )  # fmt: skip
        label = f"Regenerate {stale:,} stale line{'s' if stale != 1 else ''}"
        lines["stale"] = estimate_line(label, est)
    return lines


@bp.post("/jobs/<int:job_id>/cancel")
@login_required
def cancel_page(job_id: int) -> Response:
    """The Cancel button: end the live run, back to the job page with a message."""
    s = services()
    try:
        attempt = spending.cancel_generation(s.uow_factory, s.run_control, page_user(), job_id)
    except NotGenerating as exc:
        flash(exc.message, "error")
    else:
        flash(
            f"Run {attempt} cancelled. Items in flight went back to pending; Retry resumes.",
            "ok",
        )
    return redirect(url_for("pages.job", job_id=job_id))


@bp.get("/usage")
@login_required
def usage_page() -> str:
    """The organization's billed characters this month against its budget."""
    s = services()
    view = spending.usage_view(s.uow_factory, s.settings, page_user())
    used = None
    if view["budget_characters"]:
        used = min(100, round(100 * view["billed_characters"] / view["budget_characters"]))
    elif view["budget_characters"] == 0:
        used = 100
    cost = money(spending.price(s.settings, view["billed_characters"]))
    # The ledger counts an offline voice's characters too (a budget caps them alike), but
    # nobody bills them: the page says they were spoken.
    free = s.provider.name in OFFLINE_PROVIDERS or s.settings.tts_price_per_million_characters == 0
    return render_template("usage.html", usage=view, used=used, cost=cost, free=free)
