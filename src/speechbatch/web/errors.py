"""Error handlers: JSON for the API, HTML pages for browsers; never a bare 500."""

from __future__ import annotations

import logging

from flask import (
    Flask,
    Response,
    current_app,
    jsonify,
    make_response,
    render_template,
    request,
)
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from speechbatch.errors import SpeechbatchError
from speechbatch.services.observability import DRIVER_ERRORS, database_error

log = logging.getLogger(__name__)

HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    422: "validation_error",
}


def describe_size(size: int) -> str:
    """A byte count in words: ``25 MiB``, ``500 kB``, ``12 bytes``."""
    if size >= 1024 * 1024 and size % (1024 * 1024) == 0:
        return f"{size // (1024 * 1024)} MiB"
    if size >= 1024:
        return f"{size / 1024:g} KiB"
    return f"{size} bytes"


def error_response(status: int, code: str, message: str) -> tuple[Response, int]:
    """The one shape of every API error."""
    return jsonify({"error": {"code": code, "message": message}}), status


def wants_json() -> bool:
    """Whether this request is an API call (or asks for JSON)."""
    # A feed's files are fetched by podcast apps, never by a person's browser.
    return request.path.startswith(("/api/", "/feeds/")) or request.path == "/healthz"


def _page(status: int, message: str) -> tuple[str, int]:
    return render_template("error.html", status=status, message=message), status


def register(app: Flask) -> None:
    """Install the handlers on the app."""

    @app.errorhandler(SpeechbatchError)
    def domain_error(exc: SpeechbatchError) -> tuple[Response | str, int]:
        if exc.status >= 500:
            log.error("internal error: %s", exc.message)
        if wants_json():
            return error_response(exc.status, exc.code, exc.message)
        return _page(exc.status, exc.message)

    @app.errorhandler(CSRFError)
    def csrf_error(exc: CSRFError) -> tuple[Response | str, int]:
        message = f"CSRF check failed: {exc.description}"
        if wants_json():
            return error_response(400, "bad_request", message)
        return _page(400, message)

    @app.errorhandler(HTTPException)
    def http_error(
        exc: HTTPException,
    ) -> tuple[Response | str, int] | Response | HTTPException:
        status = exc.code or 500
        if status < 400:
            return exc
        message = exc.description or exc.name
        if status == 413:
            message = _too_large()
        answer = (
            error_response(status, HTTP_CODES.get(status, "error"), message)
            if wants_json()
            else _page(status, message)
        )
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
            # RFC 9110: a 405 says which methods the resource does support.
            response = make_response(answer)
            response.headers["Allow"] = ", ".join(exc.valid_methods)
            return response
        return answer

    def driver_error(exc: Exception) -> tuple[Response | str, int]:
        # A read outside a unit of work's block met the database down or restarting:
        # answered as the unit of work would have translated it (503: the client may retry).
        log.error("database error on %s %s: %s", request.method, request.path, exc)
        return domain_error(database_error(exc))  # type: ignore[arg-type]

    for error_class in DRIVER_ERRORS:
        app.register_error_handler(error_class, driver_error)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> tuple[Response | str, int]:
        log.exception("unhandled error on %s %s", request.method, request.path)
        if wants_json():
            return error_response(500, "internal_error", "internal server error")
        return _page(500, "Something went wrong on our side.")


def _too_large() -> str:
    """Why a request is too large: its size, or (a body within the size limit, so the
    parser refused) a form with more parts than any form of ours needs."""
    limit = current_app.extensions["speechbatch"].settings.max_content_length
    size = request.content_length
    if size is not None and size <= limit and request.max_form_parts is not None:
        return f"the form has too many parts: {request.max_form_parts:,} at most"
    return f"the request is too large: {describe_size(limit)} at most"
