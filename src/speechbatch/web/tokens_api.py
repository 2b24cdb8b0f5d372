"""API tokens over the JSON API: list, create (the secret shown once), revoke."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from speechbatch.services import accounts
from speechbatch.web.api import current, json_body, require_user
from speechbatch.web.context import reads, services

bp = Blueprint("tokens_api", __name__)


@bp.get("/api/tokens")
@require_user
def list_tokens() -> Response:
    """The caller's live tokens, newest first, never their secrets."""
    tokens = accounts.list_tokens(services().uow_factory, current(), reads=reads())
    return jsonify({"tokens": tokens})


@bp.post("/api/tokens")
@require_user
def create_token() -> tuple[Response, int]:
    """Create a named token; its secret is in this answer only."""
    body = json_body()
    return jsonify(accounts.issue_token(services().uow_factory, current(), body.get("name"))), 201


@bp.delete("/api/tokens/<int:token_id>")
@require_user
def revoke_token(token_id: int) -> tuple[str, int]:
    """Revoke one of the caller's tokens: it stops working at once, in every process."""
    accounts.revoke_token(services().uow_factory, current(), token_id)
    return "", 204
