"""GET /metrics: the Prometheus text exposition, open or behind a bearer token."""

from __future__ import annotations

import hmac

from flask import Blueprint, Response, request

from speechbatch.services.observability import metrics_exposition
from speechbatch.web.context import services

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
    body, content_type = metrics_exposition()
    return Response(body, content_type=content_type)  # content_type=, not mimetype=: one charset


def _bears(token: str) -> bool:
    """Whether the request's ``Authorization: Bearer`` carries ``token`` (constant time)."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )
