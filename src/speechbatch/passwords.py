"""Password hashing behind two functions, so that services never import werkzeug.

The stored form is werkzeug's (``scrypt:N:r:p$salt$hash``), so every hash written before
this module existed still verifies.
"""

from __future__ import annotations

import functools
import secrets

from werkzeug.security import check_password_hash, generate_password_hash


def hash_password(password: str) -> str:
    """The stored form of ``password`` (salted scrypt)."""
    return generate_password_hash(password)


def check_password(password_hash: str, password: str) -> bool:
    """Whether ``password`` matches the stored ``password_hash``."""
    return check_password_hash(password_hash, password)


@functools.cache
def dummy_hash() -> str:
    """A hash of nobody's password, of the same cost as a real one: checked when an email
    is unknown, so that refusing it takes as long as refusing a wrong password.

    Made on first use (one hash's time), not at import: most processes never need it.
    """
    return hash_password(secrets.token_urlsafe(16))
