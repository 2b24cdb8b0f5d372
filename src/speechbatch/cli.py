"""Flask CLI commands: db upgrade, downgrade and check, create-admin, create-token,
recover, set-budget, gc, and worker (a process of the worker tier)."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import sys
from collections.abc import Callable
from typing import Any

import click
from flask import Flask, current_app

from speechbatch import services as svc
from speechbatch.errors import SpeechbatchError
from speechbatch.services import accounts, schema, spending

# Where create-admin (and the quick start's demo admin) read a password from.
ADMIN_PASSWORD_VARIABLE = "SPEECHBATCH_ADMIN_PASSWORD"


def _services():  # type: ignore[no-untyped-def]
    return current_app.extensions["speechbatch"]


def register_cli(app: Flask) -> None:
    """Register the commands on the app."""
    _register_account_commands(app)
    _register_quickstart(app)
    _register_operations(app)
    _register_worker(app)


def _register_account_commands(app: Flask) -> None:
    """create-admin and create-token."""

    @app.cli.command("create-admin")
    @click.option("--org", required=True, help="organization slug (created if missing)")
    @click.option("--email", required=True)
    @click.option(
        "--password",
        envvar=ADMIN_PASSWORD_VARIABLE,
        show_envvar=True,
        prompt=True,
        hide_input=True,
        confirmation_prompt=True,
        help="the password; without it, read from the environment or asked (not echoed), "
        "so that it need not appear in the process list",
    )
    def create_admin(org: str, email: str, password: str) -> None:
        """Create an admin user (and the organization if missing)."""
        try:
            user_id = svc.create_admin(_services().uow_factory, org, email, password)
        except SpeechbatchError as exc:
            raise click.ClickException(exc.message) from None
        click.echo(f"created admin {email} (id {user_id}) in organization {org}")

    @app.cli.command("create-token")
    @click.option("--email", required=True)
    @click.option("--name", default="cli", show_default=True, help="what the token is for")
    def create_token(email: str, name: str) -> None:
        """Create a named API token; it is printed alone on the last line."""
        try:
            token = accounts.create_token(_services().uow_factory, email, name)
        except SpeechbatchError as exc:
            raise click.ClickException(exc.message) from None
        click.echo(f"API token {name!r} for {email} (shown once, stored hashed):")
        click.echo(token)


def _register_quickstart(app: Flask) -> None:
    """quickstart: the README's first command (bin/quickstart runs it)."""

    @app.cli.command("quickstart")
    @click.option("--host", default="127.0.0.1", show_default=True)
    @click.option("--port", default=8000, show_default=True)
    @click.option("--workers", default=2, show_default=True)
    def quickstart(host: str, port: int, workers: int) -> None:
        """Migrate, create a demo admin and token, then serve the app with gunicorn."""
        s = _services()
        schema.upgrade_database(s.settings.database_url)
        email, organization = "admin@example.com", "demo"
        password = os.environ.get(ADMIN_PASSWORD_VARIABLE) or secrets.token_urlsafe(9)
        try:
            svc.create_admin(s.uow_factory, organization, email, password)
        except SpeechbatchError:
            # A second start on the same instance/: the printed line must still sign in.
            svc.reset_password(s.uow_factory, email, password)
        token = accounts.create_token(s.uow_factory, email, "quickstart")
        click.echo(
            f"""
  speechbatch is starting on http://{host}:{port}/
  database : {s.settings.database_url}
  voice    : {s.settings.tts_provider} ({", ".join(s.provider.voices)})
  sign in  : {email} / {password}
  organization: {organization}
  API token: {token}
  try      : curl -H 'Authorization: Bearer {token}' http://{host}:{port}/api/jobs
"""
        )
        gunicorn = shutil.which("gunicorn", path=os.path.dirname(sys.executable)) or "gunicorn"
        bind = f"{host}:{port}"
        os.execvp(
            gunicorn, [gunicorn, "wsgi:app", "-w", str(workers), "--threads", "4", "-b", bind]
        )


def _register_operations(app: Flask) -> None:
    """db upgrade, recover, set-budget and gc."""

    @app.cli.group("db")
    def db() -> None:
        """Database schema commands."""

    _register_schema_commands(db)

    @app.cli.command("recover")
    def recover() -> None:
        """Recover every organization's dead jobs now."""
        s = _services()
        count = svc.recover_all(s.uow_factory, s.settings)
        click.echo(f"recovered {count} job(s)")

    @app.cli.command("set-budget")
    @click.option("--org", required=True, help="organization slug")
    @click.option("--characters", type=click.IntRange(min=0), help="monthly billed characters")
    @click.option("--none", "no_budget", is_flag=True, help="remove the budget")
    def set_budget(org: str, characters: int | None, no_budget: bool) -> None:
        """Set an organization's monthly budget of billed characters (--none removes it)."""
        if (characters is None) == (not no_budget):
            raise click.UsageError("give exactly one of --characters N and --none")
        try:
            spending.set_budget(_services().uow_factory, org, None if no_budget else characters)
        except SpeechbatchError as exc:
            raise click.ClickException(exc.message) from None
        if no_budget:
            click.echo(f"organization {org} has no monthly budget now")
        else:
            click.echo(f"organization {org}: monthly budget {characters:,} characters")

    @app.cli.command("gc")
    def gc() -> None:
        """Delete stored files nothing refers to (older than an hour), temporary ones too."""
        s = _services()
        collected = spending.collect_garbage(s.uow_factory, s.storage)
        for step in collected.skipped:
            click.echo(f"skipped {step}")
        for key in collected.deleted:
            click.echo(f"deleted {key}")
        click.echo(f"deleted {len(collected.deleted)} file(s)")


def _register_schema_commands(db: click.Group) -> None:
    """db upgrade, db downgrade REV and db check."""

    @db.command("upgrade")
    def db_upgrade() -> None:
        """Apply the Alembic migrations the database lacks (idempotent); say which."""
        url = _services().settings.database_url
        applied = _migrated(lambda: schema.upgrade_database(url))
        for step in applied:
            click.echo(f"applied {step.revision}: {step.title}")
        head = schema.check_database(url)[0].head
        if applied:
            click.echo(f"database is at {head} (the latest revision)")
        else:
            click.echo(f"nothing to apply: the database is at {head} (the latest revision)")

    @db.command("downgrade")
    @click.argument("revision")
    def db_downgrade(revision: str) -> None:
        """Revert the migrations newer than REVISION (an id, ``-1``, or ``base``)."""
        url = _services().settings.database_url
        reverted = _migrated(lambda: schema.downgrade_database(url, revision))
        for step in reverted:
            click.echo(f"reverted {step.revision}: {step.title}")
        current = schema.check_database(url)[0].current
        where = current or "base (no migration applied)"
        click.echo(f"database is at {where}" if reverted else f"nothing to revert: at {where}")

    @db.command("check")
    def db_check() -> None:
        """Exit non-zero, naming each difference, unless the database is at the latest
        migration and its schema equals the models."""
        state, differences = schema.check_database(_services().settings.database_url)
        if state.current != state.head:
            raise click.ClickException(
                f"the database is at {state.current or 'base (no migration applied)'}, "
                f"not at the latest revision {state.head}: run flask db upgrade"
            )
        if differences:
            for line in differences:
                click.echo(line)
            raise click.ClickException(
                f"{len(differences)} difference(s) between the models and the migrations "
                f"(database at {state.head})"
            )
        click.echo(f"the models and the migrations agree (database at {state.head})")


def _migrated(run: Callable[[], list[schema.Step]]) -> list[schema.Step]:
    """Run a migration command; a refused one is one line and exit status 1."""
    try:
        return run()
    except SpeechbatchError as exc:
        raise click.ClickException(exc.message) from None


def _register_worker(app: Flask) -> None:
    """worker: a process of the worker tier (SPEECHBATCH_RUNNER=worker)."""

    @app.cli.command("worker")
    @click.option(
        "--graceful-timeout",
        default=30.0,
        show_default=True,
        help="seconds a SIGTERM leaves in-flight calls to finish (as gunicorn's)",
    )
    def worker(graceful_timeout: float) -> None:
        """Take claimed runs, exports and the resume tick until SIGTERM; serve no HTTP."""
        s = _services()
        if not s.settings.runs_in_workers:
            raise click.ClickException(
                "SPEECHBATCH_RUNNER=worker is not set: web processes run their own jobs"
            )
        tier = s.worker_tier()

        def on_stop(signum: int, frame: Any) -> None:
            tier.stop()

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        click.echo(f"speechbatch worker ready (pid: {os.getpid()})")
        tier.serve()
        # As gunicorn's worker_exit: leave a margin inside a supervisor's grace period.
        tier.drain(max(1.0, graceful_timeout - 2.0))
        click.echo(f"speechbatch worker stopped (pid: {os.getpid()})")
