"""Access to the per-app services and the signed-in user from a request."""

from __future__ import annotations

import logging

from flask import Flask, current_app, g, request, session

from speechbatch.services import ReadScope, UserRecord, authenticate_token, open_reads, sessions
from speechbatch.services.ports import AppServices

log = logging.getLogger(__name__)


def services() -> AppServices:
    """The app's services."""
    bundle: AppServices = current_app.extensions["speechbatch"]
    return bundle


def reads() -> ReadScope:
    """This request's read transaction: the user lookup and the answer share it."""
    if "reads" not in g:
        s = services()
        g.reads = open_reads(s.uow_factory, s.documents)
    scope: ReadScope = g.reads
    return scope


def end_reads(exc: BaseException | None = None) -> None:
    """Close the request's read transaction (teardown)."""
    scope = g.pop("reads", None)
    if scope is not None:
        try:
            scope.close()
        except Exception:  # a dropped connection must not turn an answer into a 500
            log.warning("closing the request's read transaction failed", exc_info=True)


def init_app(app: Flask) -> None:
    """Close each request's read transaction at its end."""
    app.teardown_request(end_reads)


def _done_reading_for_a_write() -> None:
    """A write request holds no read transaction while its writers work."""
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        end_reads()


def session_user() -> UserRecord | None:
    """The user of the browser session, if it is live on the server (sign-out ends it,
    for every copy of its cookie); a cookie of an ended session is cleared."""
    if "session_user" not in g:
        secret = session.get("sid")
        user = (
            sessions.session_user(services().uow_factory, secret, reads=reads())
            if isinstance(secret, str)
            else None
        )
        if user is None and secret is not None:
            for key in ("sid", "email"):
                session.pop(key, None)
        g.session_user = user
        _done_reading_for_a_write()
    return g.session_user


def bearer_token() -> str | None:
    """The token of an ``Authorization: Bearer`` header, if there is one."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def bearer_user() -> UserRecord | None:
    """The user of an ``Authorization: Bearer`` token, if any and valid."""
    token = bearer_token()
    if token is None:
        return None
    user = authenticate_token(services().uow_factory, token, reads=reads())
    _done_reading_for_a_write()
    return user
