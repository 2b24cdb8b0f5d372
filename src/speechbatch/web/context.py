"""Access to the per-app services and the signed-in user from a request."""

from __future__ import annotations

from flask import current_app, g, request, session

from ..accounts import authenticate_token
from ..app import Services
from ..repository import UserRecord
from ..services import get_user


def services() -> Services:
    """The app's services."""
    return current_app.extensions["speechbatch"]


def session_user() -> UserRecord | None:
    """The user of the browser session, if any."""
    if "session_user" not in g:
        user_id = session.get("user_id")
        user = get_user(services().uow_factory, user_id) if isinstance(user_id, int) else None
        if user is not None and session.get("org_id") != user.organization_id:
            user = None
        g.session_user = user
    return g.session_user


def bearer_user() -> UserRecord | None:
    """The user of an ``Authorization: Bearer`` token, if any and valid."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return authenticate_token(services().uow_factory, token.strip())
