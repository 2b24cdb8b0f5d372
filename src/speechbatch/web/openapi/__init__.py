"""The OpenAPI 3.1 document of the JSON API, made from the API's shapes.

``GET /api/openapi.json`` serves it without authentication. The calls are listed in
``job_paths`` and ``other_paths``; every answer and body is a shape of
``speechbatch.shapes``, turned into JSON Schema here, so the document and the answers
that the services and the read side build from the same shapes cannot drift apart. A
test runs schemathesis against a live server with it (every answer must conform, and
none may be a 5xx), and another generates a client from it and runs the API with it.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from speechbatch.domain.limits import MAX_ITEM_CHARACTERS
from speechbatch.services import Limits
from speechbatch.shapes.common import Error
from speechbatch.shapes.schema import Converter
from speechbatch.web.context import services
from speechbatch.web.openapi.feed_paths import feed_paths
from speechbatch.web.openapi.idempotency import with_idempotency_keys
from speechbatch.web.openapi.job_paths import job_paths
from speechbatch.web.openapi.operations import ERROR_TEXT, answer
from speechbatch.web.openapi.other_paths import other_paths
from speechbatch.web.openapi.text import textual_requests

bp = Blueprint("openapi", __name__)

INFO = {
    "title": "speechbatch",
    "version": "1",
    "description": (
        "Turn batches of text into speech. Authenticate with `Authorization: Bearer "
        "TOKEN`, or with the browser session plus an `X-CSRFToken` header on writes. "
        'Errors are `{"error": {"code", "message"}}`.'
    ),
}
OPENAPI_JSON = {
    "/api/openapi.json": {
        "get": {
            "operationId": "getOpenApi",
            "summary": "This document.",
            "responses": {
                "200": {
                    "description": "The OpenAPI document.",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
            "security": [],
        }
    }
}


def configured(limits: Limits) -> dict[str, dict[str, Any]]:
    """What the deployment gives the shapes' ``Configured`` marks: its voices and the
    provider's item length."""
    return {
        "voice": {"enum": list(limits.voices)},
        "item_text": {"maxLength": limits.max_chars},
        "max_characters": {"maximum": min(MAX_ITEM_CHARACTERS, limits.max_chars)},
    }


def _resolved(value: Any, converter: Converter) -> Any:
    """``value`` with every type in it turned into its JSON Schema."""
    if isinstance(value, dict):
        return {key: _resolved(inner, converter) for key, inner in value.items()}
    if isinstance(value, list):
        return [_resolved(inner, converter) for inner in value]
    if value is None or isinstance(value, str | int | float):
        return value
    return converter.schema(value)


def document(limits: Limits) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every ``/api/`` call, for the configured provider."""
    converter = Converter(configured(limits))
    responses = {f"E{status}": answer(Error, text) for status, text in ERROR_TEXT.items()}
    paths = {**OPENAPI_JSON, **job_paths(), **other_paths(), **feed_paths()}
    resolved_paths = _resolved(paths, converter)
    resolved_responses = _resolved(responses, converter)
    # Applied to the finished document: every creating call's key, every request's text.
    return textual_requests(
        with_idempotency_keys(
            {
                "openapi": "3.1.0",
                "info": INFO,
                "paths": resolved_paths,
                "components": {
                    "schemas": converter.components([]),
                    "responses": resolved_responses,
                    "securitySchemes": {
                        "bearer": {"type": "http", "scheme": "bearer"},
                        "session": {"type": "apiKey", "in": "cookie", "name": "session"},
                    },
                },
                "security": [{"bearer": []}, {"session": []}],
            }
        )
    )


@bp.get("/api/openapi.json")
def openapi_json() -> Response:
    """The OpenAPI document (no authentication)."""
    return jsonify(document(services().limits))
