"""The quick start's command (``flask --app wsgi quickstart``), short of serving: what it
prints must sign in, on the first start and on every later one on the same database."""

from __future__ import annotations

import re

import pytest
from flask import Flask

from speechbatch.services import accounts
from tests.conftest import services
from tests.support.server import API_TOKEN_LINE, SIGN_IN_LINE


def _quickstart(app: Flask, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, list[str]]:
    """Run the command with gunicorn's exec stubbed out; check the printed token works;
    return (email, password, gunicorn's argv)."""
    served: list[str] = []
    monkeypatch.setattr("os.execvp", lambda _file, argv: served.extend(argv))
    result = app.test_cli_runner().invoke(args=["quickstart", "--port", "8765"])
    assert result.exit_code == 0, result.output
    sign_in, token = SIGN_IN_LINE.search(result.output), API_TOKEN_LINE.search(result.output)
    assert sign_in and token, result.output
    assert re.search(r"^\s*organization\s*: demo$", result.output, re.M), result.output
    answer = app.test_client().get("/api/voices", headers={"Authorization": f"Bearer {token[1]}"})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return sign_in[1], sign_in[2], served


def test_quickstart_prints_credentials_that_sign_in_on_every_start(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPEECHBATCH_ADMIN_PASSWORD", raising=False)
    uow_factory = services(app).uow_factory
    email, first, served = _quickstart(app, monkeypatch)
    assert served[1:] == ["wsgi:app", "-w", "2", "--threads", "4", "-b", "127.0.0.1:8765"]
    assert accounts.sign_in(uow_factory, email, first, "127.0.0.1") is not None

    again_email, again, _ = _quickstart(app, monkeypatch)  # the same instance/, started again
    assert again_email == email and again != first
    assert accounts.sign_in(uow_factory, email, again, "127.0.0.1") is not None
    assert accounts.sign_in(uow_factory, email, first, "127.0.0.1") is None


def test_quickstart_takes_the_demo_password_from_the_environment(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPEECHBATCH_ADMIN_PASSWORD", "chosen-demo-password")
    email, password, served = _quickstart(app, monkeypatch)
    assert password == "chosen-demo-password"
    assert not any(password in part for part in served)
    assert accounts.sign_in(services(app).uow_factory, email, password, "127.0.0.1") is not None
