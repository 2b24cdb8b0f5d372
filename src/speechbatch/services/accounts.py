"""Signing in and API tokens: throttled password sign-in, tokens people can name and revoke.

Plain verb functions over a unit of work, like ``services``; no Flask here.
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
from datetime import datetime
from typing import Any

from speechbatch.adapters.passwords import DUMMY_HASH, check_password
from speechbatch.adapters.repositories import TokenOwner, TokenRecord, UserRecord
from speechbatch.adapters.repositories.tokens import LAST_USE_RESOLUTION_SECONDS
from speechbatch.adapters.uow import ReadScope, UowFactory
from speechbatch.domain.limits import MAX_TOKEN_NAME
from speechbatch.domain.text import text_problem
from speechbatch.errors import DatabaseError, NotFound, TooManySignIns, ValidationError

log = logging.getLogger(__name__)

TOKEN_PREFIX = "sb_"
# What a person sees of a token to recognise it: "sb_" and 8 of its random characters.
SHOWN_PREFIX_LENGTH = len(TOKEN_PREFIX) + 8
SIGN_IN_LIMIT = 5
SIGN_IN_WINDOW_SECONDS = 15 * 60.0


def hash_token(token: str) -> str:
    """The stored form of an API token."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_view(record: TokenRecord, secret: str | None = None) -> dict[str, Any]:
    """A token as the API answers it; the secret only in the answer that created it."""
    view: dict[str, Any] = {"id": record.id, "name": record.name, "prefix": record.prefix}
    if secret is not None:
        view["token"] = secret
    view["created_at"] = _iso(record.created_at)
    if secret is None:
        view["last_used_at"] = _iso(record.last_used_at)
    return view


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def clean_token_name(name: Any) -> str:
    """Trim and check a token's name; raise ValidationError when it cannot be stored."""
    if not isinstance(name, str) or not name.strip():
        raise ValidationError("name is required", field="name")
    name = name.strip()
    if len(name) > MAX_TOKEN_NAME:
        raise ValidationError(f"name is longer than {MAX_TOKEN_NAME} characters", field="name")
    if text_problem(name) is not None:
        raise ValidationError("name must be text without NUL or lone surrogates", field="name")
    return name


def issue_token(uow_factory: UowFactory, user: UserRecord, name: Any) -> dict[str, Any]:
    """Create a named API token for ``user``; the answer carries the secret this once."""
    name = clean_token_name(name)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with uow_factory() as uow:
        record = uow.tokens.create(user.id, hash_token(secret), name, secret[:SHOWN_PREFIX_LENGTH])
        uow.commit()
    log.info("token created id=%s name=%r user=%s", record.id, name, user.email)
    return token_view(record, secret)


def create_token(uow_factory: UowFactory, email: str, name: str = "cli") -> str:
    """Create a named API token for the user with ``email``; return the secret."""
    with uow_factory(read_only=True) as uow:
        user = uow.users.get_user_by_email(email.strip())
    if user is None:
        raise NotFound(f"no user with email {email}")
    return str(issue_token(uow_factory, user, name)["token"])


def list_tokens(
    uow_factory: UowFactory, user: UserRecord, *, reads: ReadScope | None = None
) -> list[dict[str, Any]]:
    """The user's live tokens, newest first, without their secrets (in the request's
    read transaction, if given)."""
    if reads is not None:
        return [token_view(record) for record in reads.reader().tokens.list_live(user.id)]
    with uow_factory(read_only=True) as uow:
        return [token_view(record) for record in uow.tokens.list_live(user.id)]


def revoke_token(uow_factory: UowFactory, user: UserRecord, token_id: int) -> None:
    """Revoke one of the user's tokens at once; NotFound when it is not a live one of theirs."""
    with uow_factory() as uow:
        if not uow.tokens.revoke(user.id, token_id):
            raise NotFound("no such token")
        uow.commit()
    log.info("token revoked id=%s user=%s", token_id, user.email)


def authenticate_token(
    uow_factory: UowFactory, token: str, *, reads: ReadScope | None = None
) -> UserRecord | None:
    """The user a live (not revoked) bearer token belongs to, or None.

    The lookup is a read (in the request's read transaction, if given). Revocation is
    read from the database on every call, so it holds at once everywhere.
    """
    token_hash = hash_token(token)
    owner: TokenOwner | None
    if reads is not None:
        owner = reads.reader().tokens.owner_of_live(token_hash, LAST_USE_RESOLUTION_SECONDS)
    else:
        with uow_factory(read_only=True) as uow:
            owner = uow.tokens.owner_of_live(token_hash, LAST_USE_RESOLUTION_SECONDS)
    if owner is None:
        return None
    wrote = owner.last_use_is_stale and note_token_use(uow_factory, owner.token_id)
    if wrote and reads is not None:
        reads.restart()  # the rest of the request reads what was just written
    return UserRecord(owner.user_id, owner.organization_id, owner.email)


def note_token_use(uow_factory: UowFactory, token_id: int) -> bool:
    """Write a token's last use in its own short writer (the lookup's reader cannot write);
    whether this call wrote it.

    Only when the once-a-minute write is due, so most requests write nothing. It is
    bookkeeping: a busy database must not fail the request it rides on, so a failed
    write is logged and the next request past the minute tries again.
    """
    try:
        with uow_factory() as uow:
            if not uow.tokens.touch_last_used(token_id, LAST_USE_RESOLUTION_SECONDS):
                return False
            uow.commit()
    except DatabaseError:
        log.warning("writing the last use of token %s failed", token_id, exc_info=True)
        return False
    return True


def sign_in(
    uow_factory: UowFactory, email: str, password: str, client_address: str
) -> UserRecord | None:
    """The user with that email and password, or None; throttled per email and address.

    Every attempt is counted before the password is checked; past SIGN_IN_LIMIT in the
    window, TooManySignIns is raised whatever the password. A success clears the count.
    """
    email = email.strip()
    key = email.lower()[:320]
    address = (client_address or "unknown")[:64]
    with uow_factory() as uow:
        tally = uow.sign_ins.count_attempt(key, address, SIGN_IN_WINDOW_SECONDS)
        uow.commit()
    if tally.attempts > SIGN_IN_LIMIT:
        elapsed = (tally.now - tally.window_started_at).total_seconds()
        retry_after = max(1, math.ceil(SIGN_IN_WINDOW_SECONDS - elapsed))
        log.warning(
            "sign-in throttled email=%r address=%s retry_after=%ss", email, address, retry_after
        )
        raise TooManySignIns(retry_after)
    with uow_factory(read_only=True) as uow:
        credentials = uow.users.get_credentials(email)
    # An unknown email is checked against a dummy hash of the same cost: refusing it
    # must take as long as refusing a wrong password, or the time tells who has an account.
    stored = credentials.password_hash if credentials is not None else DUMMY_HASH
    matches = check_password(stored, password)
    if credentials is None or not matches:
        log.warning("sign-in failed email=%r address=%s attempt=%s", email, address, tally.attempts)
        return None
    with uow_factory() as uow:
        uow.sign_ins.forget(key, address)
        # Tallies of windows that ended count for nothing; sign-ins that succeed are rare
        # enough to sweep them here, so the table does not grow with old guesses.
        uow.sign_ins.purge_expired(SIGN_IN_WINDOW_SECONDS)
        uow.commit()
    log.info("sign-in succeeded email=%r address=%s", email, address)
    return credentials.user
