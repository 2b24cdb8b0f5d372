"""Webhooks' pure rules: the signature a standard receiver checks, forbidden addresses,
the retry schedule, URL checks, and their settings."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from speechbatch.adapters import metrics
from speechbatch.config import Settings
from speechbatch.domain.webhooks import (
    check_events,
    check_url,
    new_secret,
    next_wait,
    sign,
)
from speechbatch.errors import ConfigError, ValidationError


def test_the_signature_is_the_one_standardwebhooks_makes_and_verifies() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 24
    body = b'{"type":"ping","timestamp":"2026-12-04T18:00:00+00:00","data":{}}'
    now = int(datetime.now(UTC).timestamp())
    signature = sign(secret, "msg_1", now, body)
    reference = Webhook(secret)
    assert signature == reference.sign("msg_1", datetime.fromtimestamp(now, UTC), body)
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(now), "webhook-signature": signature}
    assert reference.verify(body, headers)["type"] == "ping"


def test_the_schedule_gives_each_wait_then_none() -> None:
    schedule = (5.0, 60.0)
    assert [next_wait(schedule, n) for n in (1, 2, 3)] == [5.0, 60.0, None]
    assert next_wait((), 1) is None


@pytest.mark.parametrize(
    "url", ["https://example.com/hook", "http://10.0.0.1:8080/x?y=1", "http://a.b.#frag"]
)
def test_good_urls_pass(url: str) -> None:
    assert check_url(url) == url


@pytest.mark.parametrize(
    "url", ["ftp://x.y", "https://", "http://a b/", "http://a:70000/", "http://ä.de/", None, ""]
)
def test_bad_urls_are_refused(url: object) -> None:
    with pytest.raises(ValidationError):
        check_url(url)


def test_events_are_deduplicated_in_a_stable_order() -> None:
    assert check_events(["job.failed", "job.completed", "job.failed"]) == [
        "job.completed", "job.failed",
    ]  # fmt: skip


def test_settings_read_the_schedule_and_private_switch() -> None:
    env = {"SPEECHBATCH_SECRET_KEY": "k" * 32}
    default = Settings.from_env(env)
    assert default.webhook_retry_schedule == (5, 60, 300, 1800, 7200, 21600, 43200, 86400)
    assert default.webhooks_reach_private
    production = Settings.from_env({**env, "SPEECHBATCH_ENV": "production"})
    assert not production.webhooks_reach_private
    chosen = Settings.from_env(
        {**env, "SPEECHBATCH_WEBHOOK_RETRY_SCHEDULE": "1, 2.5", "SPEECHBATCH_ENV": "production",
         "SPEECHBATCH_WEBHOOK_ALLOW_PRIVATE": "true"}
    )  # fmt: skip
    assert chosen.webhook_retry_schedule == (1.0, 2.5) and chosen.webhooks_reach_private
    with pytest.raises(ConfigError, match="SPEECHBATCH_WEBHOOK_RETRY_SCHEDULE"):
        Settings.from_env({**env, "SPEECHBATCH_WEBHOOK_RETRY_SCHEDULE": "5,soon"})
    with pytest.raises(ConfigError, match="SPEECHBATCH_WEBHOOK_ALLOW_PRIVATE"):
        Settings.from_env({**env, "SPEECHBATCH_WEBHOOK_ALLOW_PRIVATE": "maybe"})


def test_webhook_counters_exist_at_zero_from_the_start() -> None:
    text = metrics.exposition().decode()
    for outcome in metrics.WEBHOOK_OUTCOMES:
        assert f'speechbatch_webhook_deliveries_total{{outcome="{outcome}"}}' in text
    for result in metrics.WEBHOOK_ATTEMPT_RESULTS:
        assert f'speechbatch_webhook_attempts_total{{result="{result}"}}' in text
    assert "speechbatch_webhook_oldest_pending_seconds" in text
