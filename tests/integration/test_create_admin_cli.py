"""``flask --app wsgi create-admin``: the password from --password, from
SPEECHBATCH_ADMIN_PASSWORD, or asked twice on the terminal without echo, so it need not
appear in the process list."""

from __future__ import annotations

import pytest
from click.testing import Result
from flask import Flask

from speechbatch.services import accounts
from tests.conftest import services

EMAIL = "root@acme.test"
PASSWORD = "a-long-secret-1"


def _create_admin(
    app: Flask, *args: str, env: dict[str, str] | None = None, input: str | None = None
) -> Result:
    return app.test_cli_runner().invoke(
        args=["create-admin", "--org", "acme", "--email", EMAIL, *args], env=env, input=input
    )


def _signs_in(app: Flask, password: str) -> bool:
    return accounts.sign_in(services(app).uow_factory, EMAIL, password, "127.0.0.1") is not None


@pytest.fixture(autouse=True)
def _no_password_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPEECHBATCH_ADMIN_PASSWORD", raising=False)


def test_the_password_option_is_still_accepted(app: Flask) -> None:
    result = _create_admin(app, "--password", PASSWORD)
    assert result.exit_code == 0, result.output
    assert _signs_in(app, PASSWORD)


def test_the_password_is_read_from_the_environment(app: Flask) -> None:
    result = _create_admin(app, env={"SPEECHBATCH_ADMIN_PASSWORD": PASSWORD}, input="")
    assert result.exit_code == 0, result.output
    assert PASSWORD not in result.output
    assert _signs_in(app, PASSWORD)


def test_without_either_the_password_is_asked_twice_and_not_echoed(app: Flask) -> None:
    result = _create_admin(app, input=f"{PASSWORD}\n{PASSWORD}\n")
    assert result.exit_code == 0, result.output
    assert "Password" in result.output and "Repeat for confirmation" in result.output
    assert PASSWORD not in result.output
    assert _signs_in(app, PASSWORD)


def test_two_different_answers_are_asked_again(app: Flask) -> None:
    result = _create_admin(app, input=f"{PASSWORD}\nanother-one-2\n{PASSWORD}\n{PASSWORD}\n")
    assert result.exit_code == 0, result.output
    assert "do not match" in result.output
    assert _signs_in(app, PASSWORD)


def test_a_short_password_is_refused_with_the_rule(app: Flask) -> None:
    result = _create_admin(app, env={"SPEECHBATCH_ADMIN_PASSWORD": "short"})
    assert result.exit_code != 0
    assert "at least 8 characters" in result.output
