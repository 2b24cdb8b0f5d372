"""GET /metrics: the Prometheus text exposition, open or behind a bearer token."""

from __future__ import annotations

import hmac

from flask import Blueprint, Response, request
from prometheus_client import CONTENT_TYPE_LATEST

from .. import metrics
from .context import services

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
def metrics_endpoint() -> Response:
    """Prometheus text exposition (with SPEECHBATCH_METRICS_TOKEN set, only for its bearer)."""
    token = services().settings.metrics_token
    if token is not None and not _bears(token):
        return Response(
            "a bearer token is required\n",
            status=401,
            content_type="text/plain; charset=utf-8",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    # CONTENT_TYPE_LATEST carries its charset already: as a mimetype, Flask would add a
    # second one, which Prometheus 2 logs as an error and Prometheus 3 refuses.
    return Response(metrics.exposition(), content_type=CONTENT_TYPE_LATEST)


def _bears(token: str) -> bool:
    """Whether the request's ``Authorization: Bearer`` carries ``token`` (constant time)."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )
