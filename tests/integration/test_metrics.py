"""GET /metrics: one charset in its Content-Type, labelled counters present at zero from
the start, SPEECHBATCH_METRICS_TOKEN, and the webhooks' series (deliveries by outcome,
attempts by result, the age of the oldest pending delivery)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient

from speechbatch import create_app
from speechbatch.adapters import metrics
from speechbatch.app import Services
from speechbatch.config import Settings
from speechbatch.domain.statuses import RunOutcome
from speechbatch.runner import deliveries
from speechbatch.services import webhooks as hooks
from tests.conftest import close_services, services, with_settings
from tests.fakes import FakeProvider
from tests.helpers import new_admin, wait_for
from tests.support.webhook_receiver import Receiver

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
        + [
            ("speechbatch_webhook_deliveries_total", "outcome", value)
            for value in metrics.WEBHOOK_OUTCOMES
        ]
        + [
            ("speechbatch_webhook_attempts_total", "result", value)
            for value in metrics.WEBHOOK_ATTEMPT_RESULTS
        ]
    )
    for name, label, value in expected:
        line = re.search(rf'^{name}\{{{label}="{value}"\}} (\S+)$', text, re.MULTILINE)
        assert line, f"{name}{{{label}={value!r}}} missing:\n{text}"
        assert float(line[1]) == 0.0
    assert re.search(r"^speechbatch_webhook_oldest_pending_seconds 0\.0$", text, re.MULTILINE)


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


def scraped(client: FlaskClient) -> dict[str, float]:
    """The webhook series of a /metrics scrape, by name and labels."""
    text = client.get("/metrics").get_data(as_text=True)
    return {
        m[1]: float(m[2])
        for m in re.finditer(r"^(speechbatch_webhook_[^ ]+) (\S+)$", text, re.MULTILINE)
    }


def scraped_when(
    client: FlaskClient, condition: Callable[[dict[str, float]], bool]
) -> dict[str, float] | None:
    """A scrape that meets ``condition``, or None."""
    found = scraped(client)
    return found if condition(found) else None


DELIVERIES = 'speechbatch_webhook_deliveries_total{{outcome="{}"}}'
ATTEMPTS = 'speechbatch_webhook_attempts_total{{result="{}"}}'
OLDEST = "speechbatch_webhook_oldest_pending_seconds"


def test_webhook_outcomes_attempts_and_the_oldest_pending_age_are_scraped(
    client: FlaskClient,
    sending: Callable[..., Services],
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(deliveries, "GAUGE_INTERVAL_SECONDS", 0.05)
    svc = sending(schedule=(60.0,))
    user = new_admin(svc, "acme", "admin@acme.test")
    body = {"url": receiver.url, "events": ["job.completed"]}
    webhook_id = int(hooks.create_webhook(svc.uow_factory, user, body)["id"])
    receiver.script = [503]
    before = scraped(client)
    hooks.ping(svc.uow_factory, user, webhook_id)
    # The first attempt answers 503: the delivery waits a minute for its retry, pending.
    # Its age passes 0.1 s before that attempt is counted when the sender is slow to send
    # (a loaded machine): wait for both (the outcome is counted after the attempt), then
    # count exactly.
    failed_once = DELIVERIES.format("retrying")
    aging = wait_for(
        lambda: scraped_when(
            client, lambda m: m[OLDEST] > 0.1 and m[failed_once] > before[failed_once]
        )
    )
    assert aging is not None
    assert aging[DELIVERIES.format("retrying")] - before[DELIVERIES.format("retrying")] == 1
    assert aging[ATTEMPTS.format("error_status")] - before[ATTEMPTS.format("error_status")] == 1
    (delivery,) = hooks.list_deliveries(svc.uow_factory, user, webhook_id)
    hooks.redeliver(svc.uow_factory, user, webhook_id, delivery["id"])
    delivered = DELIVERIES.format("delivered")
    done = wait_for(
        lambda: scraped_when(
            client,
            lambda m: (
                m[OLDEST] == 0.0 and receiver.count() == 2 and m[delivered] > before[delivered]
            ),
        )
    )
    assert done is not None
    assert done[DELIVERIES.format("delivered")] - before[DELIVERIES.format("delivered")] == 1
    assert done[ATTEMPTS.format("delivered")] - before[ATTEMPTS.format("delivered")] == 1
    assert done[DELIVERIES.format("failed")] == before[DELIVERIES.format("failed")]
