"""Organizations and users (API tokens have their own repository: tokens)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import ColumnElement, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from speechbatch.adapters.repositories.tables import organizations, users


@dataclass(frozen=True)
class UserRecord:
    """A signed-in principal, as every request sees it: no password hash (only the sign-in
    reads that, through ``get_credentials``)."""

    id: int
    organization_id: int
    email: str


@dataclass(frozen=True)
class Credentials:
    """A user and their password hash, for the sign-in's check and nothing else."""

    user: UserRecord
    password_hash: str = field(repr=False)


class Users(Protocol):
    """What the services need of users."""

    def get_or_create_organization(self, slug: str) -> int: ...
    def create_user(self, organization_id: int, email: str, password_hash: str) -> int | None: ...
    def get_user_by_email(self, email: str) -> UserRecord | None: ...
    def get_credentials(self, email: str) -> Credentials | None: ...
    def get_user(self, user_id: int) -> UserRecord | None: ...
    def set_password_hash(self, email: str, password_hash: str) -> bool: ...


class UsersRepository:
    """Users and their organizations, over one session."""

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
            select(users.c.id, users.c.organization_id, users.c.email).where(*where)
        ).first()
        return UserRecord(row.id, row.organization_id, row.email) if row else None

    def get_user_by_email(self, email: str) -> UserRecord | None:
        """Find a user by email (case-insensitive)."""
        return self._user_where(_email_is(email))

    def get_credentials(self, email: str) -> Credentials | None:
        """A user by email (case-insensitive) with their password hash: the sign-in's read."""
        row = self.session.execute(
            select(users.c.id, users.c.organization_id, users.c.email, users.c.password_hash).where(
                _email_is(email)
            )
        ).first()
        if row is None:
            return None
        return Credentials(UserRecord(row.id, row.organization_id, row.email), row.password_hash)

    def get_user(self, user_id: int) -> UserRecord | None:
        """Find a user by id."""
        return self._user_where(users.c.id == user_id)

    def set_password_hash(self, email: str, password_hash: str) -> bool:
        """Replace a user's password hash (email case-insensitive); whether the user exists."""
        row = self.session.execute(
            update(users)
            .where(_email_is(email))
            .values(password_hash=password_hash)
            .returning(users.c.id)
        ).first()
        return row is not None


def _email_is(email: str) -> ColumnElement[bool]:
    """The user's email, compared without regard to case."""
    return func.lower(users.c.email) == email.lower()
