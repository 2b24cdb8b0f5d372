"""GET /metrics: the Prometheus text exposition (no auth, as scrapers expect)."""

from __future__ import annotations

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST

from .. import metrics

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
def metrics_endpoint() -> Response:
    """Prometheus text exposition."""
    return Response(metrics.exposition(), mimetype=CONTENT_TYPE_LATEST)
