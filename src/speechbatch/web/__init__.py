"""HTTP entrypoints: the JSON API and the admin pages."""

from __future__ import annotations

from flask import Flask
from flask_wtf.csrf import CSRFProtect


def register_web(app: Flask, csrf: CSRFProtect, *, production: bool) -> None:
    """Register every blueprint, the request context, error handlers and headers."""
    from speechbatch.web import (
        api,
        context,
        covers_api,
        editing_api,
        editing_pages,
        errors,
        exports_api,
        feeds,
        lexicon_api,
        lexicon_pages,
        metrics_api,
        openapi,
        pages,
        renders_api,
        security,
        session_pages,
        text_fields,
        tokens_api,
        usage,
        webhooks_api,
        webhooks_pages,
    )

    app.register_blueprint(api.bp)
    csrf.exempt(api.bp)  # the API checks X-CSRFToken itself for session-authenticated writes
    app.register_blueprint(pages.bp)
    app.register_blueprint(exports_api.bp)
    csrf.exempt(exports_api.create_export)  # require_user checks X-CSRFToken on session writes
    app.register_blueprint(renders_api.bp)
    csrf.exempt(renders_api.job_renders)  # require_user checks X-CSRFToken on session writes
    app.register_blueprint(feeds.bp)
    csrf.exempt(feeds.job_feed)  # require_user checks X-CSRFToken on session writes
    app.register_blueprint(covers_api.bp)
    csrf.exempt(covers_api.cover)  # require_user checks X-CSRFToken on session writes
    app.register_blueprint(usage.bp)
    csrf.exempt(usage.cancel)  # require_user checks X-CSRFToken on session writes
    app.register_blueprint(editing_api.bp)
    app.register_blueprint(editing_pages.bp)
    csrf.exempt(editing_api.bp)  # require_user checks X-CSRFToken on session writes
    app.register_blueprint(lexicon_api.bp)
    app.register_blueprint(lexicon_pages.bp)
    csrf.exempt(lexicon_api.bp)  # require_user checks X-CSRFToken on session writes
    app.register_blueprint(session_pages.bp)
    app.register_blueprint(tokens_api.bp)
    csrf.exempt(tokens_api.bp)  # require_user checks X-CSRFToken on session writes
    app.register_blueprint(webhooks_api.bp)
    csrf.exempt(webhooks_api.bp)  # require_user checks X-CSRFToken on session writes
    app.register_blueprint(webhooks_pages.bp)
    app.register_blueprint(openapi.bp)
    app.register_blueprint(metrics_api.bp)
    context.init_app(app)
    text_fields.install(app)
    errors.register(app)
    security.install(app, production=production)
