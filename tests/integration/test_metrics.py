"""GET /metrics: one charset in its Content-Type, labelled counters present at zero from
the start, and SPEECHBATCH_METRICS_TOKEN."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient

from speechbatch import create_app
from speechbatch.adapters import metrics
from speechbatch.config import Settings
from speechbatch.domain.statuses import RunOutcome
from tests.conftest import close_services, services, with_settings
from tests.fakes import FakeProvider

TOKEN = "scrape-secret-1"


def test_the_content_type_has_one_charset(client: FlaskClient) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    content_type = response.headers["Content-Type"]
    assert content_type.startswith("text/plain; version=")
    assert content_type.count("charset=") == 1, content_type


def test_labelled_counters_exist_at_zero_in_a_fresh_process() -> None:
    # A process of its own: this one's counters have counted other tests' work.
    text = subprocess.run(
        [
            sys.executable,
            "-c",
            "from speechbatch.adapters import metrics; print(metrics.exposition().decode())",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    expected = (
        [("speechbatch_claims_total", "result", value) for value in metrics.CLAIM_RESULTS]
        + [
            ("speechbatch_runs_total", "outcome", str(o))
            for o in RunOutcome
            if o is not RunOutcome.RUNNING
        ]
        + [
            ("speechbatch_recoveries_total", "reason", "lease"),
            ("speechbatch_recoveries_total", "reason", "worker"),
            ("speechbatch_provider_calls_total", "status", "200"),
            ("speechbatch_provider_calls_total", "status", "429"),
            ("speechbatch_provider_calls_total", "status", "timeout"),
            ("speechbatch_billed_characters_total", "status", "200"),
            ("speechbatch_budget_refusals_total", "where", "claim"),
            ("speechbatch_budget_refusals_total", "where", "run"),
        ]
    )
    for name, label, value in expected:
        line = re.search(rf'^{name}\{{{label}="{value}"\}} (\S+)$', text, re.MULTILINE)
        assert line, f"{name}{{{label}={value!r}}} missing:\n{text}"
        assert float(line[1]) == 0.0


@pytest.fixture
def guarded(settings: Settings, provider: FakeProvider) -> Iterator[Flask]:
    app = create_app(with_settings(settings, metrics_token=TOKEN), provider=provider)
    yield app
    close_services(services(app))


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}],
    ids=["none", "wrong", "not-bearer"],
)
def test_with_a_metrics_token_a_scrape_without_it_is_401(
    guarded: Flask, headers: dict[str, str]
) -> None:
    response = guarded.test_client().get("/metrics", headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert "speechbatch_" not in response.get_data(as_text=True)


def test_with_a_metrics_token_its_bearer_scrapes(guarded: Flask) -> None:
    response = guarded.test_client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert "speechbatch_claims_total" in response.get_data(as_text=True)


def test_without_a_metrics_token_metrics_are_open(client: FlaskClient) -> None:
    assert client.get("/metrics").status_code == 200
