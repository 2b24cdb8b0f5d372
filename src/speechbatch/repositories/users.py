"""Organizations, users and their API tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import BindParameter, ColumnElement, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .tables import api_tokens, organizations, users


@dataclass(frozen=True)
class UserRecord:
    """A signed-in principal."""

    id: int
    organization_id: int
    email: str
    password_hash: str


class Users(Protocol):
    """What the services need of users (and, for now, of tokens)."""

    def get_or_create_organization(self, slug: str) -> int: ...
    def create_user(self, organization_id: int, email: str, password_hash: str) -> int | None: ...
    def get_user_by_email(self, email: str) -> UserRecord | None: ...
    def get_user(self, user_id: int) -> UserRecord | None: ...
    def create_token(self, user_id: int, token_hash: str) -> None: ...
    def get_user_by_token(self, token_hash: str) -> UserRecord | None: ...


class UsersRepository:
    """Users, their organizations and (minimal) token lookups, over one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def get_or_create_organization(self, slug: str) -> int:
        """Return the organization's id, creating it if missing."""
        found = self.session.execute(
            select(organizations.c.id).where(organizations.c.slug == slug)
        ).scalar_one_or_none()
        if found is not None:
            return int(found)
        return int(
            self.session.execute(
                insert(organizations).values(slug=slug).returning(organizations.c.id)
            ).scalar_one()
        )

    def create_user(self, organization_id: int, email: str, password_hash: str) -> int | None:
        """Create a user; None when the email is taken."""
        try:
            with self.session.begin_nested():
                return int(
                    self.session.execute(
                        insert(users)
                        .values(
                            organization_id=organization_id,
                            email=email,
                            password_hash=password_hash,
                        )
                        .returning(users.c.id)
                    ).scalar_one()
                )
        except IntegrityError:
            return None

    def _user_where(self, *where: ColumnElement[bool]) -> UserRecord | None:
        row = self.session.execute(
            select(users.c.id, users.c.organization_id, users.c.email, users.c.password_hash).where(
                *where
            )
        ).first()
        return (
            UserRecord(row.id, row.organization_id, row.email, row.password_hash) if row else None
        )

    def get_user_by_email(self, email: str) -> UserRecord | None:
        """Find a user by email (case-insensitive)."""
        return self._user_where(func.lower(users.c.email) == email.lower())

    def get_user(self, user_id: int) -> UserRecord | None:
        """Find a user by id."""
        return self._user_where(users.c.id == user_id)

    def create_token(self, user_id: int, token_hash: str) -> None:
        """Store the hash of a new API token."""
        self.session.execute(insert(api_tokens).values(user_id=user_id, token_hash=token_hash))

    def get_user_by_token(self, token_hash: str) -> UserRecord | None:
        """Find the user that owns a token hash."""
        return self._user_where(
            users.c.id.in_(select(api_tokens.c.user_id).where(token_accepted(token_hash)))
        )


def token_accepted(token_hash: str | BindParameter[str]) -> ColumnElement[bool]:
    """The condition on ``api_tokens`` under which a token authenticates: the one place
    every token lookup (including the poll's single statement) takes it from."""
    return api_tokens.c.token_hash == token_hash
