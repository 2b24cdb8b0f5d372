"""Behind a real PgBouncer in transaction mode with exactly the README's settings (the
session's ``pgbouncer``: two server connections, so that a client's transactions move
between server sessions): migrations, the time limits of every transaction, nothing
prepared, runs with concurrency, a cancel, a render, an export, webhook deliveries (each
event once), and LISTEN (polls and one line in the log, or a direct connection of its own).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.script import ScriptDirectory
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import text

from speechbatch import create_app
from speechbatch.adapters import db, notifications, postgres
from speechbatch.adapters.migrate import alembic_config
from speechbatch.adapters.uow import SessionUowFactory
from speechbatch.config import Settings
from speechbatch.errors import DatabaseError
from speechbatch.runner.export_builder import wait_for_exports
from speechbatch.runner.render_builder import wait_for_renders
from speechbatch.services import create_token
from tests.conftest import close_services, services, with_settings
from tests.fakes import FakeProvider
from tests.helpers import new_admin, statement_reader, wait_for
from tests.support.pgbouncer import PgBouncer
from tests.support.render_audio import Tone, encode_mp3, tone_samples
from tests.support.server import drop_pg_database, make_pg_database
from tests.support.webhook_receiver import Receiver

# Every test but the migrations' needs a database of the test server: PostgreSQL only.
POSTGRESQL = pytest.mark.parametrize("backend", ["postgresql"])
POLLING_LINE = "goes through a pooler, where LISTEN receives nothing"
# The time limits of every transaction, as SHOW answers them.
LIMITS = {
    "lock_timeout": "2s",
    "statement_timeout": "30s",
    "idle_in_transaction_session_timeout": "10s",
}


@pytest.fixture
def settings_for(tmp_path: Path) -> Any:
    """``settings_for(url)``: the tests' settings on a database of its own."""
    return lambda url: Settings(
        database_url=url, secret_key="test-secret", storage_dir=str(tmp_path / "audio")
    ).validate()


@pytest.fixture
def bounced_url(database_url: str, pgbouncer: PgBouncer) -> str:
    """This test's database through the PgBouncer."""
    return pgbouncer.url(database_url)


@pytest.fixture
def make_bounced(
    settings: Settings,
    provider: FakeProvider,
    bounced_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Any]:
    """``make_bounced(**settings)``: an app whose database URL goes through the PgBouncer,
    its background work started (webhook senders quick to look again); closed at the end.
    The test is a process of its own: what an earlier test's app said once is forgotten
    (the test databases' names come back, tests/support/pg_pool.py)."""
    monkeypatch.setattr(notifications, "_said_polling", set())
    apps: list[Flask] = []

    def make(**changes: Any) -> Flask:
        app = create_app(
            with_settings(
                settings,
                database_url=bounced_url,
                webhook_retry_schedule=(0.2,),
                webhook_allow_private=True,
                webhook_timeout_seconds=2.0,
                webhook_idle_seconds=0.05,
                **changes,
            ),
            provider=provider,
        )
        app.config["TESTING"] = True
        services(app).runner.start_background()
        apps.append(app)
        return app

    yield make
    for app in apps:
        close_services(services(app))


def _auth(app: Flask) -> dict[str, str]:
    svc = services(app)
    admin = new_admin(svc, "acme", "admin@acme.test")
    return {"Authorization": f"Bearer {create_token(svc.uow_factory, admin.email)}"}


def _call(client: FlaskClient, method: str, path: str, auth: dict[str, str], **kw: Any) -> Any:
    answer = client.open(path, method=method, headers=auth, **kw)
    assert answer.status_code < 300, (method, path, answer.status_code, answer.get_json())
    return answer.get_json()


def _job(client: FlaskClient, auth: dict[str, str], texts: list[str]) -> int:
    body = {"title": "through the pooler", "voice": "alloy", "items": texts}
    return int(_call(client, "POST", "/api/jobs", auth, json=body)["id"])


def _ended(client: FlaskClient, auth: dict[str, str], job_id: int) -> dict[str, Any]:
    def ended() -> Any:
        job = _call(client, "GET", f"/api/jobs/{job_id}?items=none", auth)
        return job if job["status"] not in ("PENDING", "GENERATING") else None

    found: dict[str, Any] = wait_for(ended, timeout=30)
    return found


def _settings_seen(uow: Any) -> dict[str, str]:
    return {name: uow.session.execute(text(f"SHOW {name}")).scalar() for name in LIMITS}


def test_flask_db_upgrade_runs_through_pgbouncer(
    pg_available: None, pgbouncer: PgBouncer, settings_for: Any
) -> None:
    """``flask --app wsgi db upgrade`` (in this process: the command, not the process, is
    what meets the pooler) on an empty database."""
    empty = make_pg_database("sb_test_pgb")
    try:
        app = create_app(settings_for(pgbouncer.url(empty)), provider=FakeProvider())
        try:
            done = app.test_cli_runner().invoke(args=["db", "upgrade"])
        finally:
            close_services(services(app))
        assert done.exit_code == 0, done.output
        head = ScriptDirectory.from_config(alembic_config(empty)).get_current_head()
        with psycopg.connect(postgres.libpq_url(empty)) as conn:  # directly
            assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (head,)
    finally:
        drop_pg_database(empty)


@POSTGRESQL
def test_every_transaction_through_pgbouncer_has_the_time_limits(bounced_url: str) -> None:
    """Set by each transaction for itself: the server sessions keep none of them."""
    engine = db.make_engine(bounced_url)
    statements = db.make_engine(bounced_url, statement_reads=True)
    factory = SessionUowFactory(
        db.make_session_factory(engine), db.make_session_factory(statements)
    )
    try:
        for unit in (factory(), factory(read_only=True), factory.statement_reader()):
            with unit as uow:
                assert _settings_seen(uow) == LIMITS
        with psycopg.connect(postgres.libpq_url(bounced_url), autocommit=True) as plain:
            assert plain.execute("SHOW lock_timeout").fetchone() == ("0",)
    finally:
        engine.dispose()
        statements.dispose()


@POSTGRESQL
def test_a_statement_reader_through_pgbouncer_cannot_write(bounced_url: str) -> None:
    statements = db.make_session_factory(db.make_engine(bounced_url, statement_reads=True))
    factory = SessionUowFactory(statements, statements)
    try:
        with pytest.raises(DatabaseError), statement_reader(factory) as uow:
            uow.session.execute(text("CREATE TABLE written_by_a_reader (n int)"))
        with statement_reader(factory) as reader:
            assert reader.session.execute(text("SHOW transaction_read_only")).scalar() == "on"
    finally:
        statements.kw["bind"].dispose()


def _prepare_threshold(connection: Any) -> int | None:
    """psycopg's prepare_threshold of a SQLAlchemy connection's DBAPI connection."""
    threshold: int | None = connection.connection.driver_connection.prepare_threshold
    return threshold


@POSTGRESQL
def test_nothing_is_prepared_through_pgbouncer_however_often_it_runs(
    bounced_url: str, database_url: str
) -> None:
    """Many short units of work from several threads, each statement run far more often
    than psycopg's threshold: none fails (a prepared statement would be looked for on
    another server session), and only the direct connection prepares."""
    engine = db.make_engine(bounced_url)
    factory = SessionUowFactory(db.make_session_factory(engine))
    errors: list[BaseException] = []

    def work() -> None:
        for n in range(25):
            try:
                with factory() as uow:
                    assert uow.session.execute(text("SELECT 41 + :n"), {"n": n}).scalar() == 41 + n
                    uow.commit()
                with factory(read_only=True) as reader:
                    assert reader.session.execute(text("SELECT count(*) FROM jobs")).scalar() == 0
            except BaseException as error:
                errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(6)]
    direct = db.make_engine(database_url)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        with engine.connect() as pooled, direct.connect() as own:
            assert pooled.info[postgres.THROUGH_POOLER] and not own.info[postgres.THROUGH_POOLER]
            assert (_prepare_threshold(pooled), _prepare_threshold(own)) == (None, 5)
    finally:
        engine.dispose()
        direct.dispose()
    assert errors == []


@POSTGRESQL
def test_jobs_run_side_by_side_and_a_cancel_holds_through_pgbouncer(
    make_bounced: Any, provider: FakeProvider
) -> None:
    app = make_bounced(item_concurrency=3)
    client, auth = app.test_client(), _auth(app)
    provider.latency = 0.05
    jobs = {_job(client, auth, [f"job {j} line {i}" for i in range(8)]): j for j in range(2)}
    for job_id in jobs:
        _call(client, "POST", f"/api/jobs/{job_id}/generate", auth)
    for job_id in jobs:
        assert _ended(client, auth, job_id)["status"] == "COMPLETED"
    assert sorted(provider.calls.values()) == [1] * 16
    assert provider.max_in_flight > 1

    provider.gate = threading.Event()
    cancelled = _job(client, auth, [f"cancelled line {i}" for i in range(6)])
    _call(client, "POST", f"/api/jobs/{cancelled}/generate", auth)
    wait_for(lambda: provider.in_flight > 0)
    _call(client, "POST", f"/api/jobs/{cancelled}/cancel", auth)
    provider.gate.set()
    job = _ended(client, auth, cancelled)
    assert job["runs"][-1]["outcome"] == "CANCELLED"
    _call(client, "POST", f"/api/jobs/{cancelled}/generate", auth)
    assert _ended(client, auth, cancelled)["status"] == "COMPLETED"


@POSTGRESQL
def test_a_render_and_an_export_complete_through_pgbouncer(
    make_bounced: Any, provider: FakeProvider
) -> None:
    app = make_bounced()
    client, auth = app.test_client(), _auth(app)
    texts = ["The first line.", "The second line.", "The third line."]
    for n, line in enumerate(texts):
        provider.audio[line] = encode_mp3(tone_samples(Tone(line, 0.5, 300 + 100 * n, 0.2)))
    job_id = _job(client, auth, texts)
    _call(client, "POST", f"/api/jobs/{job_id}/generate", auth)
    assert _ended(client, auth, job_id)["status"] == "COMPLETED"
    render = _call(client, "POST", f"/api/jobs/{job_id}/renders", auth, json={"format": "mp3"})
    export = _call(client, "POST", "/api/exports", auth)
    assert wait_for_renders(30) and wait_for_exports(30)
    render = _call(client, "GET", f"/api/jobs/{job_id}/renders/{render['id']}", auth)
    export = _call(client, "GET", f"/api/exports/{export['id']}", auth)
    assert (render["status"], export["status"]) == ("COMPLETED", "COMPLETED"), (render, export)
    for url in (render["download_url"], export["download_url"]):
        with client.get(url, headers=auth) as download:
            assert download.status_code == 200 and download.data


@POSTGRESQL
def test_each_webhook_event_is_delivered_once_through_pgbouncer(
    make_bounced: Any, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Pings and a run's end, far more statements than psycopg's threshold from ten
    sender threads: each event arrives once, and the API says DELIVERED."""
    caplog.set_level(logging.ERROR, logger="speechbatch.runner.deliveries")
    app = make_bounced()
    client, auth = app.test_client(), _auth(app)
    hook = {"url": receiver.url, "events": ["job.completed"]}
    webhook_id = _call(client, "POST", "/api/webhooks", auth, json=hook)["id"]
    events = [
        _call(client, "POST", f"/api/webhooks/{webhook_id}/ping", auth)["event_id"]
        for _ in range(20)
    ]
    job_id = _job(client, auth, ["Tell me when it is done."])
    _call(client, "POST", f"/api/jobs/{job_id}/generate", auth)
    assert _ended(client, auth, job_id)["status"] == "COMPLETED"

    def settled() -> Any:
        found = _call(client, "GET", f"/api/webhooks/{webhook_id}/deliveries", auth)
        deliveries = found["deliveries"]
        return deliveries if all(d["status"] != "PENDING" for d in deliveries) else None

    deliveries = wait_for(settled, timeout=30)
    assert len(deliveries) == 21 and {d["status"] for d in deliveries} == {"DELIVERED"}
    assert {d["attempts"] for d in deliveries} == {1}
    ids = receiver.ids()
    assert len(ids) == len(set(ids)) == 21 and set(events) <= set(ids)
    assert [r.getMessage() for r in caplog.records] == []


def _listeners(database_url: str) -> int:
    """Server sessions of this database whose last statement was a LISTEN."""
    with psycopg.connect(postgres.libpq_url(database_url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
        ).fetchone()
    return int(row[0]) if row else 0


@POSTGRESQL
def test_a_process_behind_pgbouncer_polls_and_says_so_once(
    make_bounced: Any, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="speechbatch.adapters.notifications")
    app = make_bounced(item_concurrency=1)
    client, auth = app.test_client(), _auth(app)
    for n in range(2):  # each run's items wait for slots: the gate's listener starts
        job_id = _job(client, auth, [f"run {n} line {i}" for i in range(3)])
        _call(client, "POST", f"/api/jobs/{job_id}/generate", auth)
        assert _ended(client, auth, job_id)["status"] == "COMPLETED"
    said = [r.getMessage() for r in caplog.records if POLLING_LINE in r.getMessage()]
    assert len(said) == 1, said
    assert "SPEECHBATCH_LISTEN_DATABASE_URL" in said[0]
    assert _listeners(database_url) == 0


@POSTGRESQL
def test_a_process_behind_pgbouncer_listens_over_the_listen_database_url(
    make_bounced: Any, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="speechbatch.adapters.notifications")
    app = make_bounced(listen_database_url=database_url)
    client, auth = app.test_client(), _auth(app)
    job_id = _job(client, auth, ["Wake me through a direct connection."])
    _call(client, "POST", f"/api/jobs/{job_id}/generate", auth)
    assert _ended(client, auth, job_id)["status"] == "COMPLETED"
    wait_for(lambda: _listeners(database_url) == 1)
    assert not [r for r in caplog.records if POLLING_LINE in r.getMessage()]
    assert services(app).listen_dsn == postgres.libpq_url(database_url)
