"""Browser sessions that end on the server: sign-in opens one, sign-out ends it, and
"sign out everywhere" ends every session of a user.

A session is a row (``browser_sessions``) and the browser's signed cookie carries a
random secret whose SHA-256 names the row; every request looks the row up. Chosen over a
per-user generation carried in the cookie: a generation can only end all of a user's
sessions at once, so signing out on one browser would sign out every other one too, where
a row ends exactly that session (a copy of its cookie included), or all of them; and the
lookup is the one indexed read per request that finding the user by id was before. The
rows are the database's, so every worker of every machine sees an ended session at once.
"""

from __future__ import annotations

import logging
import secrets

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import ReadScope, UowFactory
from speechbatch.services.accounts import hash_token

log = logging.getLogger(__name__)

# As long as Flask keeps a permanent session's cookie (its default, 31 days).
SESSION_SECONDS = 31 * 24 * 3600.0


def start_session(uow_factory: UowFactory, user: UserRecord) -> str:
    """Open a session for ``user``; the secret its cookie carries (stored only hashed).
    Sessions whose time ran out are swept here: sign-ins are rare enough to carry it."""
    secret = secrets.token_urlsafe(32)
    with uow_factory() as uow:
        uow.sessions.purge_expired_sessions()
        uow.sessions.open_session(user.id, hash_token(secret), SESSION_SECONDS)
        uow.commit()
    return secret


def session_user(
    uow_factory: UowFactory, secret: str, *, reads: ReadScope | None = None
) -> UserRecord | None:
    """The user of a live session, or None (ended, expired or never opened)."""
    if reads is not None:
        return reads.reader().sessions.user_of_session(hash_token(secret))
    with uow_factory(read_only=True) as uow:
        return uow.sessions.user_of_session(hash_token(secret))


def end_session(uow_factory: UowFactory, secret: str) -> None:
    """End one session: its cookie, and every copy of it, signs in nobody from now on."""
    with uow_factory() as uow:
        uow.sessions.end_session(hash_token(secret))
        uow.commit()


def end_all_sessions(uow_factory: UowFactory, user: UserRecord) -> int:
    """End every session of ``user`` (this one included); how many were live."""
    with uow_factory() as uow:
        ended = uow.sessions.end_sessions_of(user.id)
        uow.commit()
    log.info("signed out everywhere user=%s sessions=%s", user.email, ended)
    return ended
