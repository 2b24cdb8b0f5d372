"""The admin's ways in: API tokens (made, listed, revoked) and sign out everywhere (end
every session of the signed-in admin, this one included)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, redirect, render_template, request, session, url_for
from werkzeug.wrappers import Response

from speechbatch.errors import NotFound, ValidationError
from speechbatch.services import accounts, sessions
from speechbatch.web.context import reads, services
from speechbatch.web.pages import PageResponse, current, login_required

bp = Blueprint("session_pages", __name__)


@bp.post("/sessions/revoke-all")
@login_required
def revoke_all() -> Response:
    """End every session of the signed-in admin on every browser, then sign in again."""
    ended = sessions.end_all_sessions(services().uow_factory, current())
    session.clear()
    flash(f"Signed out everywhere ({ended} session{'s' if ended != 1 else ''} ended).", "ok")
    return redirect(url_for("pages.login"))


# --- API tokens -----------------------------------------------------------------------


def _tokens_page(created: dict[str, Any] | None = None, error: str | None = None) -> PageResponse:
    tokens = accounts.list_tokens(services().uow_factory, current(), reads=reads())
    page = render_template("tokens.html", tokens=tokens, created=created, error=error)
    return (page, 422) if error else page


@bp.get("/tokens")
@login_required
def tokens() -> PageResponse:
    """The signed-in admin's API tokens, with a form that creates one."""
    return _tokens_page()


@bp.post("/tokens")
@login_required
def create_token() -> PageResponse:
    """Create a token and show its secret on this answer only (it is stored hashed)."""
    try:
        created = accounts.issue_token(services().uow_factory, current(), request.form.get("name"))
    except ValidationError as exc:
        return _tokens_page(error=exc.message)
    return _tokens_page(created=created)


@bp.post("/tokens/<int:token_id>/revoke")
@login_required
def revoke_token(token_id: int) -> Response:
    """Revoke a token: it stops working at once, in every process."""
    try:
        accounts.revoke_token(services().uow_factory, current(), token_id)
    except NotFound:
        flash("That token does not exist or is already revoked.", "error")
    else:
        flash("Token revoked: it no longer works.", "ok")
    return redirect(url_for("session_pages.tokens"))
