"""Prometheus metrics (the /metrics endpoint that serves them is in web/metrics_api.py).

Counters live in this process. Under gunicorn with several workers, set
``PROMETHEUS_MULTIPROC_DIR`` to an empty directory so that /metrics aggregates every
worker (prometheus-client's multiprocess mode); without it a scrape sees one worker.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

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
REUSED_ITEMS = Counter(
    "speechbatch_reused_items_total", "Items made DONE with existing audio instead of a call"
)
BUDGET_REFUSALS = Counter(
    "speechbatch_budget_refusals_total", "Calls or claims the budget could not pay for", ["where"]
)
CANCELS = Counter("speechbatch_cancels_total", "Runs cancelled by a person")


def record_provider_call(status: str, seconds: float, characters: int) -> None:
    """Count one provider call, its latency and the characters it billed."""
    PROVIDER_CALLS.labels(status=status).inc()
    PROVIDER_LATENCY.observe(seconds)
    BILLED_CHARACTERS.labels(status=status).inc(characters)


def exposition() -> bytes:
    """The Prometheus text exposition of this process (every worker's in multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest()
