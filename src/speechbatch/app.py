"""The app factory: the only place the application is assembled."""

from __future__ import annotations

import atexit
import logging
from dataclasses import dataclass, field
from pathlib import Path

from flask import Flask
from flask_wtf.csrf import CSRFProtect
from sqlalchemy import Engine
from werkzeug.exceptions import NotFound
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.routing import IntegerConverter

from speechbatch.adapters.db import make_engine, make_session_factory
from speechbatch.adapters.postgres import libpq_url
from speechbatch.adapters.providers import build_provider
from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.providers.registry import voice_details
from speechbatch.adapters.read import DocumentCache
from speechbatch.adapters.repositories.deliveries import DeliveryRules
from speechbatch.adapters.storage import build_storage
from speechbatch.adapters.uow import SessionUowFactory, UowFactory
from speechbatch.adapters.webhook_http import WebhookHTTP
from speechbatch.config import Settings
from speechbatch.runner.builders import Builders
from speechbatch.runner.deliveries import (
    ATTEMPT_MARGIN_SECONDS,
    LEASE_MARGIN_SECONDS,
    DeliverySenders,
)
from speechbatch.runner.export_builder import wait_for_exports
from speechbatch.runner.handoff import RunHandOff
from speechbatch.runner.impact_pass import ImpactPasses
from speechbatch.runner.lifecycle import Runner, drain_all
from speechbatch.runner.render_builder import wait_for_renders
from speechbatch.runner.stale_pass import StalePasses
from speechbatch.runner.worker import WorkerTier
from speechbatch.services import Limits
from speechbatch.services.ports import Storage
from speechbatch.shapes.accounts import VoiceDetail

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "templates"
STATIC_DIR = Path(__file__).resolve().parent / "static"
csrf = CSRFProtect()


class DatabaseId(IntegerConverter):
    """An ``<int:…>`` URL part: any digits; a number that no database id can be (0, or
    beyond 2**63 - 1) names nothing and answers 404, as an id that does not exist (a
    converter that only declined to match let another rule answer 405)."""

    def to_python(self, value: str) -> int:
        number = int(value)
        if not 1 <= number <= 2**63 - 1:
            raise NotFound()
        return number


@dataclass
class Services:
    """What request handlers and CLI commands need, built once per app."""

    settings: Settings
    engine: Engine
    uow_factory: UowFactory
    provider: TTSProvider
    storage: Storage
    # This process's runner; with SPEECHBATCH_RUNNER=worker only a worker process
    # (``worker_tier``) starts it, and web processes claim through a RunHandOff.
    runner: Runner
    # What clicks and cancels go through: ``runner``, or the hand-off to the worker tier.
    run_control: Runner | RunHandOff
    # Where exports and renders started here are built (and a worker's taken ones).
    builders: Builders
    # The engine of one-statement reads (autocommit, read-only sessions): the common poll.
    statement_engine: Engine | None = None
    # The JSON answers this process built lately, by job and version (read/documents.py).
    documents: DocumentCache = field(default_factory=DocumentCache)
    # The LISTEN connection's DSN on PostgreSQL (slot releases, runs for the worker tier).
    listen_dsn: str | None = None
    # The thread that writes the stale marks after a lexicon change (a PUT nudges it).
    stale_passes: StalePasses | None = None
    # The thread that counts the lexicon's dry runs (a POST of one nudges it).
    impact_passes: ImpactPasses | None = None

    def dispose(self) -> None:
        """Close the pooled connections of both engines (after the lexicon passes end)."""
        for passes in (self.stale_passes, self.impact_passes):
            if passes is not None:
                passes.wait(10.0)
        self.engine.dispose()
        if self.statement_engine is not None:
            self.statement_engine.dispose()

    def worker_tier(self) -> WorkerTier:
        """A worker process's tier (``flask --app wsgi worker``) around this runner."""
        return build_worker_tier(self)

    def voice_details(self) -> list[VoiceDetail]:
        """Every voice of the enabled providers with its provider, label and language."""
        return voice_details(self.provider)

    @property
    def limits(self) -> Limits:
        """Job limits for the configured provider."""
        return Limits(voices=self.provider.voices, max_chars=self.provider.max_chars)


def create_app(settings: Settings | None = None, *, provider: TTSProvider | None = None) -> Flask:
    """Build the Flask app from settings (the environment's when none are given)."""
    settings = settings or Settings.from_env()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    app = _flask_app(settings)
    app.extensions["speechbatch"] = build_services(settings, provider)
    if settings.trusted_proxies:
        # The client address (the sign-in throttle's key), scheme and host are the ones the
        # trusted proxies report; with none trusted a forged X-Forwarded-For changes nothing.
        n = settings.trusted_proxies
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=n, x_proto=n, x_host=n)  # type: ignore[method-assign]
    csrf.init_app(app)

    from speechbatch.cli import register_cli
    from speechbatch.web import register_web

    register_web(app, csrf, production=settings.is_production)
    register_cli(app)
    # Processes not run by gunicorn (flask run) still end their runs as INTERRUPTED.
    atexit.register(drain_all, 5.0)
    return app


def _flask_app(settings: Settings) -> Flask:
    """The Flask object with its configuration (sessions, limits, URL ids, JSON)."""
    app = Flask(
        __name__,
        template_folder=str(TEMPLATES_DIR),
        static_folder=str(STATIC_DIR),
        instance_relative_config=False,
    )
    app.config.update(
        SECRET_KEY=settings.secret_key,
        MAX_CONTENT_LENGTH=settings.max_content_length,
        # Flask caps one form field at 500 kB by default; a pasted job of 5,000 items of
        # 4,096 characters is one field, and the body limit is the one that applies.
        MAX_FORM_MEMORY_SIZE=settings.max_content_length,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.is_production,
        WTF_CSRF_TIME_LIMIT=None,
    )
    # Ids are BIGINTs: a larger number in a URL is a 404, not an overflow in the driver.
    app.url_map.converters["int"] = DatabaseId
    app.json.sort_keys = False  # type: ignore[attr-defined]
    return app


def webhook_senders(settings: Settings, runner: Runner) -> DeliverySenders:
    """This process's webhook sender threads (started with its background loops)."""
    timeout = settings.webhook_timeout_seconds
    rules = DeliveryRules(
        lease_seconds=timeout + LEASE_MARGIN_SECONDS,
        worker_dead_seconds=settings.worker_dead_seconds,
        attempt_seconds=timeout + ATTEMPT_MARGIN_SECONDS,
    )
    return DeliverySenders(
        runner.tx,
        lambda: WebhookHTTP(allow_private=settings.webhooks_reach_private, timeout=timeout),
        settings.webhook_retry_schedule,
        runner.worker_id,
        rules,
        idle_seconds=settings.webhook_idle_seconds,
        join_seconds=timeout + 2.0,
    )


def build_services(settings: Settings, provider: TTSProvider | None = None) -> Services:
    """The database, provider, storage and runner of one process, wired together."""
    if settings.is_sqlite:
        db_path = settings.database_url.removeprefix("sqlite:///")
        if db_path and db_path != ":memory:":
            Path(db_path).parent.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.database_url)
    statement_engine = make_engine(settings.database_url, statement_reads=True)
    uow_factory = SessionUowFactory(
        make_session_factory(engine), make_session_factory(statement_engine)
    )
    provider = provider or build_provider(settings)
    storage = build_storage(settings)
    listen_dsn = None
    if engine.dialect.name == "postgresql":
        # The listeners' own connections (LISTEN): a direct one when the database URL goes
        # through a pooler; through one they poll instead (adapters/notifications.py).
        listen_dsn = libpq_url(settings.listen_database_url or settings.database_url)
    passes = (
        StalePasses(uow_factory, provider.max_chars),
        ImpactPasses(uow_factory, provider.max_chars),
    )
    runner = _make_runner(uow_factory, provider, storage, settings, listen_dsn, passes)
    runner.background_work.append(webhook_senders(settings, runner))
    return Services(
        settings=settings,
        engine=engine,
        uow_factory=uow_factory,
        provider=provider,
        storage=storage,
        runner=runner,
        run_control=RunHandOff(provider) if settings.runs_in_workers else runner,
        builders=Builders(uow_factory, storage, settings),
        statement_engine=statement_engine,
        listen_dsn=listen_dsn,
        stale_passes=passes[0],
        impact_passes=passes[1],
    )


def _make_runner(
    uow_factory: SessionUowFactory,
    provider: TTSProvider,
    storage: Storage,
    settings: Settings,
    listen_dsn: str | None,
    passes: tuple[StalePasses, ImpactPasses],
) -> Runner:
    """A runner of this process, whose background tick resumes interrupted jobs and
    starts a due lexicon stale pass and the counts of waiting dry runs (a dead
    process's, or one a request left to a tick)."""
    from speechbatch.runner.loops import resume_interrupted

    runner = Runner(uow_factory, provider, storage, settings, listen_dsn)

    def tick() -> None:
        resume_interrupted(uow_factory, runner)
        for lexicon_passes in passes:
            lexicon_passes.nudge()

    runner.background_tick = tick
    return runner


def build_worker_tier(services: Services) -> WorkerTier:
    """Wire a worker process: its runner (runs, the resume tick) and what it takes.

    Exports, renders and webhook deliveries start here: each is a taker in
    ``tier.takers`` (and a graceful-stop step in ``tier.drainers``).
    """
    uow_factory = services.uow_factory
    assert isinstance(uow_factory, SessionUowFactory)
    tier = WorkerTier(services.runner, uow_factory, services.listen_dsn)
    tier.takers.append(services.builders.take_queued_exports)
    tier.takers.append(services.builders.take_queued_renders)
    tier.drainers.append(wait_for_exports)
    tier.drainers.append(wait_for_renders)
    return tier
