"""The app in this process, for figures that need to see inside it (statements, one claim).

Set up through its contract as ``_http`` does (``flask --app wsgi`` bootstraps a fresh
PostgreSQL database, the settings are ``SPEECHBATCH_*`` variables), then built by
``create_app()`` here and driven through the Flask test client with a bearer token.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import app_env, bootstrap, pg_database
from flask import Flask
from flask.testing import FlaskClient


@dataclass
class InProcess:
    """The app, its services (``app.extensions["speechbatch"]``) and an admin's token."""

    app: Flask
    services: Any
    token: str

    def call(
        self, client: FlaskClient, method: str, path: str, json: Any = None, expect: int = 200
    ) -> Any:
        """One API call through the test client; its JSON (asserts the status)."""
        headers = {"Authorization": f"Bearer {self.token}"}
        answer = client.open(path, method=method, json=json, headers=headers)
        if answer.status_code != expect:
            raise RuntimeError(f"{method} {path}: {answer.status_code} {answer.text[:500]}")
        return answer.get_json(silent=True)


@contextlib.contextmanager
def app_in_process(provider_url: str, **settings: Any) -> Iterator[InProcess]:
    """``create_app()`` on a fresh bootstrapped PostgreSQL database; disposed at the end."""
    with pg_database("inproc") as url, tempfile.TemporaryDirectory(prefix="sb_bench_") as tmp:
        env = app_env(url, provider_url, Path(tmp) / "audio", **settings)
        token = bootstrap(env)
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        try:
            from speechbatch import create_app

            app = create_app()
            logging.disable(logging.INFO)  # the runner logs every run: keep the figures readable
            services = app.extensions["speechbatch"]
            try:
                yield InProcess(app, services, token)
            finally:
                services.runner.drain(10.0)
                services.dispose()
        finally:
            os.environ.clear()
            os.environ.update(saved)
