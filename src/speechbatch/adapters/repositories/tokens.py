"""API tokens: create, list, revoke, and find the user of a live token."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import (
    BindParameter,
    Column,
    ColumnElement,
    and_,
    case,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from speechbatch.adapters.db import ago, db_now
from speechbatch.adapters.repositories.tables import api_tokens, users

# A token's last use is written at most once a minute, not on every request.
LAST_USE_RESOLUTION_SECONDS = 60.0


@dataclass(frozen=True)
class TokenRecord:
    """A token as its owner sees it: never its secret."""

    id: int
    name: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None


@dataclass(frozen=True)
class TokenOwner:
    """Who a live token authenticates, and whether its last use is due to be written."""

    token_id: int
    user_id: int
    organization_id: int
    email: str
    last_use_is_stale: bool


class Tokens(Protocol):
    """What the services need of API tokens."""

    def create(self, user_id: int, token_hash: str, name: str, prefix: str) -> TokenRecord: ...
    def list_live(self, user_id: int) -> list[TokenRecord]: ...
    def revoke(self, user_id: int, token_id: int) -> bool: ...
    def owner_of_live(self, token_hash: str, touch_after_seconds: float) -> TokenOwner | None: ...
    def touch_last_used(self, token_id: int, touch_after_seconds: float) -> bool: ...


class TokenRepository:
    """SQL about ``api_tokens``; runs inside the caller's unit of work, never commits."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def create(self, user_id: int, token_hash: str, name: str, prefix: str) -> TokenRecord:
        """Store a new token (its hash only) and return it as its owner sees it."""
        row = self.session.execute(
            insert(api_tokens)
            .values(user_id=user_id, token_hash=token_hash, name=name, prefix=prefix)
            .returning(*_record_columns())
        ).one()
        return TokenRecord(**row._mapping)

    def list_live(self, user_id: int) -> list[TokenRecord]:
        """The user's tokens that are not revoked, newest first."""
        rows = self.session.execute(
            select(*_record_columns())
            .where(api_tokens.c.user_id == user_id, api_tokens.c.revoked_at.is_(None))
            .order_by(api_tokens.c.id.desc())
        )
        return [TokenRecord(**row._mapping) for row in rows]

    def revoke(self, user_id: int, token_id: int) -> bool:
        """Revoke one of the user's live tokens; whether it was live and theirs."""
        won = self.session.execute(
            update(api_tokens)
            .where(
                api_tokens.c.id == token_id,
                api_tokens.c.user_id == user_id,
                api_tokens.c.revoked_at.is_(None),
            )
            .values(revoked_at=db_now())
            .returning(api_tokens.c.id)
        ).first()
        return won is not None

    def owner_of_live(self, token_hash: str, touch_after_seconds: float) -> TokenOwner | None:
        """The owner of a token that is not revoked, or None.

        ``last_use_is_stale`` says whether the last use is older than
        ``touch_after_seconds`` (or was never written), so the caller writes it only then.
        """
        row = self.session.execute(
            select(
                api_tokens.c.id.label("token_id"),
                users.c.id.label("user_id"),
                users.c.organization_id,
                users.c.email,
                last_use_due(touch_after_seconds).label("last_use_is_stale"),
            )
            .join(users, users.c.id == api_tokens.c.user_id)
            .where(token_accepted(token_hash))
        ).first()
        return TokenOwner(**row._mapping) if row is not None else None

    def touch_last_used(self, token_id: int, touch_after_seconds: float) -> bool:
        """Write the token's last use unless it was written within ``touch_after_seconds``.

        Conditional, so requests racing on several processes write it once; whether this
        call wrote it.
        """
        won = self.session.execute(
            update(api_tokens)
            .where(api_tokens.c.id == token_id, _last_use_older_than(touch_after_seconds))
            .values(last_used_at=db_now())
            .returning(api_tokens.c.id)
        ).first()
        return won is not None


def token_accepted(token_hash: str | BindParameter[str]) -> ColumnElement[bool]:
    """The condition on ``api_tokens`` under which a token authenticates (its hash, not
    revoked): the one place every token lookup, the poll's single statement included,
    takes it from."""
    return and_(api_tokens.c.token_hash == token_hash, api_tokens.c.revoked_at.is_(None))


def last_use_due(seconds: float = LAST_USE_RESOLUTION_SECONDS) -> ColumnElement[bool]:
    """Whether the token's last use is due to be written (never written, or older than
    ``seconds``), as a column a lookup can return."""
    return case((_last_use_older_than(seconds), True), else_=False)


def _record_columns() -> tuple[Column[Any], ...]:
    c = api_tokens.c
    return (c.id, c.name, c.prefix, c.created_at, c.last_used_at)


def _last_use_older_than(seconds: float) -> ColumnElement[bool]:
    """The token's last use was never written, or is older than ``seconds``."""
    last = api_tokens.c.last_used_at
    return or_(last.is_(None), last < ago(seconds))
