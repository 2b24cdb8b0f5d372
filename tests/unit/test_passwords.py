"""Password hashing lives behind passwords.py: hashes of every earlier form still verify,
and no other module of the package imports werkzeug.security."""

from __future__ import annotations

import ast
from pathlib import Path

from speechbatch.adapters import passwords

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "speechbatch"


def test_a_hash_verifies_its_password_only() -> None:
    stored = passwords.hash_password("password-1")
    assert passwords.check_password(stored, "password-1")
    assert not passwords.check_password(stored, "password-2")


def test_an_older_werkzeug_hash_still_verifies() -> None:
    from werkzeug.security import generate_password_hash

    stored = generate_password_hash("password-1", method="pbkdf2:sha256:1000")
    assert passwords.check_password(stored, "password-1")


def test_only_passwords_py_imports_werkzeug_security() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "werkzeug.security":
                offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == ["adapters/passwords.py"]


def test_nothing_above_the_repositories_names_the_password_hash_but_the_sign_in() -> None:
    # The web layer, the read side and the services get users without it; only the sign-in
    # (accounts.py) reads it, and the users service (users.py) hands a new hash to the
    # repository.
    allowed = {"accounts.py", "users.py", "passwords.py", "models.py"}
    offenders = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "password_hash" in path.read_text()
        and "repositories" not in path.parts
        and path.name not in allowed
    )
    assert offenders == []


def test_the_dummy_hash_is_of_the_current_method_and_cost_and_matches_nothing() -> None:
    method = passwords.hash_password("password-1").split("$")[0]
    assert passwords.DUMMY_HASH.split("$")[0] == method
    assert not passwords.check_password(passwords.DUMMY_HASH, "password-1")
