"""Headers every answer carries: a strict Content-Security-Policy and friends."""

from __future__ import annotations

from flask import Flask
from werkzeug.wrappers import Response

# Scripts and styles come only from our static files (no inline script, no style
# attributes); nothing may frame our pages, so a hostile page cannot trick a click on
# Generate or Regenerate, which spend money.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "media-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
HSTS = "max-age=31536000; includeSubDomains"


def install(app: Flask, *, production: bool) -> None:
    """Add the security headers to every answer of ``app`` (HSTS in production only)."""
    headers = {
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        # Same-origin requests keep their Referer (Flask-WTF checks it on HTTPS).
        "Referrer-Policy": "same-origin",
    }
    if production:
        headers["Strict-Transport-Security"] = HSTS

    @app.after_request
    def add_security_headers(response: Response) -> Response:
        for name, value in headers.items():
            response.headers.setdefault(name, value)
        return response
