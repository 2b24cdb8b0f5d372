"""Password hashing behind two functions, so that services never import werkzeug.

The stored form is werkzeug's (``scrypt:N:r:p$salt$hash``), so every hash written before
this module existed still verifies.
"""

from __future__ import annotations

from werkzeug.security import check_password_hash, generate_password_hash

# The hash of a random password nobody kept, in the current method and cost: checked when
# an email is unknown, so that refusing it takes as long as refusing a wrong password.
# A constant, so that no process pays (and shows) an extra hash on its first refusal;
# tests/unit/test_sign_in.py checks that its method and cost are hash_password's.
DUMMY_HASH = (
    "scrypt:32768:8:1$ttZWgeUrgTELM8im$d6dc181edd85b475baf9102948f7161d3aab361d22f17cc287aa"
    "48278b40ba2d6cb02bfdfd4155e56370befbe009fad2076327b5631294d697b98c165d8186aa"
)


def hash_password(password: str) -> str:
    """The stored form of ``password`` (salted scrypt)."""
    return generate_password_hash(password)


def check_password(password_hash: str, password: str) -> bool:
    """Whether ``password`` matches the stored ``password_hash``."""
    return check_password_hash(password_hash, password)
