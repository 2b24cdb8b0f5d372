"""What the process tells its operators: the metrics exposition, and which driver errors
mean the database is away (so an entry point can answer 503 instead of 500)."""

from __future__ import annotations

from ..adapters import metrics
from ..adapters.db_errors import DRIVER_ERRORS, database_error

__all__ = ["DRIVER_ERRORS", "database_error", "metrics_exposition"]


def metrics_exposition() -> tuple[bytes, str]:
    """The Prometheus text exposition of every process of this server, and its content
    type (which carries its charset already)."""
    return metrics.exposition(), metrics.CONTENT_TYPE
