"""Prometheus metrics (the /metrics endpoint that serves them is in web/metrics_api.py).

Counters live in this process. Under gunicorn with several workers, set
``PROMETHEUS_MULTIPROC_DIR`` to an empty directory before the workers start, so that
/metrics aggregates every worker (prometheus-client's multiprocess mode; gunicorn.conf.py
marks dead workers); without it a scrape sees the one worker that answered.

Every labelled counter starts at zero for each label value the code knows, so that a
rate over it exists before the first event (and an alert on it is not silently absent).
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from speechbatch.domain.statuses import RunOutcome

# The exposition's content type: it carries its charset already (as a mimetype, Flask
# would add a second one, which Prometheus 2 logs as an error and Prometheus 3 refuses).
CONTENT_TYPE = CONTENT_TYPE_LATEST
CLAIM_RESULTS = ("won", "refused", "resumed", "taken")
RUN_OUTCOMES = tuple(str(o) for o in RunOutcome if o is not RunOutcome.RUNNING)
RECOVERY_REASONS = ("lease", "worker", "unassigned")
BUDGET_REFUSAL_PLACES = ("claim", "run")
# A provider call's label: its HTTP status, or the kind of failure (providers/retry.py).
# These are the ones every deployment sees; another HTTP status appears when it happens.
# "not_sent": the request never left this machine (a refused connection, a failed lookup or
# TLS handshake): refunded, so it bills nothing.
PROVIDER_CALL_STATUSES = (
    "200", "429", "500", "502", "503", "504", "timeout", "connection_error", "error",
    "not_sent",
)  # fmt: skip

CLAIMS = Counter("speechbatch_claims_total", "Job claims by result", ["result"])
RUNS = Counter("speechbatch_runs_total", "Runs ended, by outcome", ["outcome"])
RECOVERIES = Counter("speechbatch_recoveries_total", "Dead runs recovered, by reason", ["reason"])
FENCED = Counter("speechbatch_fenced_writes_total", "Writes refused because the run was fenced")
PROVIDER_CALLS = Counter(
    "speechbatch_provider_calls_total", "Provider calls (each is billed), by status", ["status"]
)
PROVIDER_LATENCY = Histogram(
    "speechbatch_provider_latency_seconds",
    "Duration of one provider call",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
BILLED_CHARACTERS = Counter(
    "speechbatch_billed_characters_total",
    "Characters sent to the provider (billed), by the call's outcome",
    ["status"],
)
IN_DOUBT_CALLS = Counter(
    "speechbatch_provider_calls_in_doubt_total",
    "Provider calls whose request was written and whose answer was lost (billed, in doubt)",
)
IN_DOUBT_CHARACTERS = Counter(
    "speechbatch_in_doubt_characters_total",
    "Billed characters of calls whose answer was lost (in doubt)",
)
REUSED_ITEMS = Counter(
    "speechbatch_reused_items_total", "Items made DONE with existing audio instead of a call"
)
BUDGET_REFUSALS = Counter(
    "speechbatch_budget_refusals_total", "Calls or claims the budget could not pay for", ["where"]
)
CANCELS = Counter("speechbatch_cancels_total", "Runs cancelled by a person")
# Webhooks: what each delivery came to, what each attempt did, and how far behind they are.
WEBHOOK_OUTCOMES = ("delivered", "retrying", "failed")
WEBHOOK_ATTEMPT_RESULTS = (
    "delivered", "error_status", "redirect", "timeout", "connection_error", "forbidden_address",
)  # fmt: skip
WEBHOOK_DELIVERIES = Counter(
    "speechbatch_webhook_deliveries_total",
    "Webhook delivery attempts' outcomes: delivered, retrying (another attempt is due), failed",
    ["outcome"],
)
WEBHOOK_ATTEMPTS = Counter(
    "speechbatch_webhook_attempts_total", "Webhook POSTs, by what they came to", ["result"]
)
WEBHOOK_OLDEST_PENDING = Gauge(
    "speechbatch_webhook_oldest_pending_seconds",
    "Age of the oldest pending delivery to an enabled webhook",
    multiprocess_mode="livemax",
)


def _start_at_zero() -> None:
    """Create every known label value of every labelled counter, at zero."""
    known: tuple[tuple[Counter, str, tuple[str, ...]], ...] = (
        (CLAIMS, "result", CLAIM_RESULTS),
        (RUNS, "outcome", RUN_OUTCOMES),
        (RECOVERIES, "reason", RECOVERY_REASONS),
        (PROVIDER_CALLS, "status", PROVIDER_CALL_STATUSES),
        (BILLED_CHARACTERS, "status", PROVIDER_CALL_STATUSES),
        (BUDGET_REFUSALS, "where", BUDGET_REFUSAL_PLACES),
        (WEBHOOK_DELIVERIES, "outcome", WEBHOOK_OUTCOMES),
        (WEBHOOK_ATTEMPTS, "result", WEBHOOK_ATTEMPT_RESULTS),
    )
    for counter, label, values in known:
        for value in values:
            counter.labels(**{label: value})


_start_at_zero()


def record_provider_call(
    status: str, seconds: float, characters: int, *, in_doubt: bool = False
) -> None:
    """Count one provider call, its latency and the characters it billed (and, when its
    answer was lost, as in doubt)."""
    PROVIDER_CALLS.labels(status=status).inc()
    PROVIDER_LATENCY.observe(seconds)
    BILLED_CHARACTERS.labels(status=status).inc(characters)
    if in_doubt:
        IN_DOUBT_CALLS.inc()
        IN_DOUBT_CHARACTERS.inc(characters)


def exposition() -> bytes:
    """The Prometheus text exposition of this process (every worker's in multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest()
