"""Admin users: create one, reset a password, look one up."""

from __future__ import annotations

import logging

from speechbatch.adapters.passwords import hash_password
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.uow import ReadScope, UowFactory
from speechbatch.errors import (
    NotFound,
    ValidationError,
)

log = logging.getLogger(__name__)


def _check_password(password: str) -> None:
    if len(password) < 8:
        raise ValidationError("the password must have at least 8 characters", field="password")


def create_admin(uow_factory: UowFactory, org_slug: str, email: str, password: str) -> int:
    """Create the organization if missing and an admin user in it; return the user id."""
    org_slug, email = org_slug.strip(), email.strip()
    if not org_slug or not email or "@" not in email:
        raise ValidationError("an organization slug and a valid email are required")
    _check_password(password)
    with uow_factory() as uow:
        org_id = uow.users.get_or_create_organization(org_slug)
        user_id = uow.users.create_user(org_id, email, hash_password(password))
        if user_id is None:
            raise ValidationError(f"a user with email {email} exists already", field="email")
        uow.commit()
    return user_id


def reset_password(uow_factory: UowFactory, email: str, password: str) -> None:
    """Give an existing user a new password (the quick start's demo admin on a re-run)."""
    _check_password(password)
    with uow_factory() as uow:
        if not uow.users.set_password_hash(email.strip(), hash_password(password)):
            raise NotFound(f"no user with email {email}")
        uow.commit()


def get_user(
    uow_factory: UowFactory, user_id: int, *, reads: ReadScope | None = None
) -> UserRecord | None:
    """A user by id, or None (a read: it never takes SQLite's write lock)."""
    if reads is not None:
        return reads.reader().users.get_user(user_id)
    with uow_factory(read_only=True) as uow:
        return uow.users.get_user(user_id)
