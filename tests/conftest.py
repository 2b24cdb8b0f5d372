"""Fixtures: a fresh database per test on SQLite and on PostgreSQL, the app, clients."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from speechbatch import create_app
from speechbatch.adapters.migrate import upgrade
from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.config import Settings
from speechbatch.runner.export_builder import wait_for_exports
from speechbatch.runner.render_builder import wait_for_renders
from speechbatch.services import create_token
from tests.fakes import FakeProvider
from tests.helpers import new_admin
from tests.support.moto import MotoServer
from tests.support.pg_pool import DatabasePool
from tests.support.pgbouncer import PgBouncer
from tests.support.s3 import LocalS3
from tests.support.seaweed import SeaweedServer
from tests.support.server import pg_unreachable_reason
from tests.support.workers import (
    SUMMARIES,
    WORKER_SUMMARY,
    is_chaos_test,
    postgresql_in_use,
)

PG_ADMIN_DSN = os.environ.get(
    "SPEECHBATCH_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
PG_URL_BASE = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
BACKENDS = ["sqlite", "postgresql"]
# The storage tests run on both: ``@pytest.mark.parametrize("storage_kind", STORAGES,
# indirect=True)``; every other test keeps the folder.
STORAGES = ["folder", "s3"]
# gc's tests run on a second S3 implementation too: moto's server.
GC_STORAGES = [*STORAGES, "moto"]
S3Server = TypeVar("S3Server", bound=LocalS3)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller: keep the summary a finished worker left."""
    text = getattr(node, "workeroutput", {}).get(WORKER_SUMMARY)
    if text:
        node.config.stash.setdefault(SUMMARIES, []).append(text)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print the summaries left for the end (``leave_summary``), this run's or its workers'."""
    for text in config.stash.get(SUMMARIES, []):
        for line in text.splitlines():
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _postgresql_stays_up(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test holds the PostgreSQL server up (a chaos test on the other worker stops
    it, see tests/support/workers.py); the chaos tests, one after another, need not."""
    if is_chaos_test(request.node):
        yield
        return
    with postgresql_in_use():
        yield


def _pg_admin() -> psycopg.Connection[Any]:
    return psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=3)


@pytest.fixture(scope="session")
def pg_available() -> None:
    """Skip (or fail under CI=true) when PostgreSQL does not answer (process-level tests)."""
    reason = pg_unreachable_reason()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required under CI: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A migrated PostgreSQL database that each test copies (CREATE DATABASE ... TEMPLATE)."""
    try:
        conn = _pg_admin()
    except psycopg.OperationalError as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required under CI and unreachable: {exc}")
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    name = f"sb_tmpl_{uuid.uuid4().hex[:10]}"
    with conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    upgrade(f"{PG_URL_BASE}/{name}")
    yield name
    # At the session's end, after the last test's own hold on the server was released.
    with postgresql_in_use(), _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that each test copies."""
    path = tmp_path_factory.mktemp("tmpl") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


def make_database(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[str]:
    """An empty migrated database of ``backend`` for one test."""
    if backend == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "test.db"
        shutil.copyfile(template, path)
        yield f"sqlite:///{path}"
        return
    pool: DatabasePool = request.getfixturevalue("pg_pool")
    name = pool.take()
    try:
        yield f"{PG_URL_BASE}/{name}"
    finally:
        pool.give_back(name)


@pytest.fixture(scope="session")
def pg_pool(pg_template: str) -> Iterator[DatabasePool]:
    """This process's test databases, emptied between tests (tests/support/pg_pool.py)."""
    pool = DatabasePool(PG_ADMIN_DSN, pg_template)
    yield pool
    with postgresql_in_use():
        pool.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each test that uses a database runs on SQLite and on PostgreSQL."""
    return str(request.param)


@pytest.fixture
def database_url(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh migrated database URL."""
    yield from make_database(request, backend, tmp_path)


def _s3_server(server: S3Server) -> Iterator[S3Server]:
    """Start ``server`` for the session (skipped, or failed under CI=true, when it cannot
    start) and stop it at the end."""
    _start_or_skip(server.start, server.name)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """A SeaweedFS S3 server for the session."""
    yield from _s3_server(SeaweedServer(tmp_path_factory.mktemp("seaweed")))


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """moto's S3 server for the session: a second S3 implementation."""
    yield from _s3_server(MotoServer(tmp_path_factory.mktemp("moto")))


@pytest.fixture(scope="session")
def pgbouncer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgBouncer]:
    """A PgBouncer in transaction mode in front of the test server, with the README's
    settings, for the session (skipped, or failed under CI=true, when it cannot start)."""
    bouncer = PgBouncer(tmp_path_factory.mktemp("pgbouncer"), f"{PG_URL_BASE}/postgres")
    _start_or_skip(bouncer.start, "PgBouncer")
    yield bouncer
    bouncer.stop()


def _start_or_skip(start: Callable[[], object], name: str) -> None:
    """Start a server of the session (``start`` raises RuntimeError when it cannot): its
    tests are skipped without it, or fail under CI=true (bin/test installs them all)."""
    try:
        start()
    except RuntimeError as exc:
        if IN_CI:
            pytest.fail(f"{name} is required under CI and did not start: {exc}")
        pytest.skip(f"{name} did not start: {exc}")


@pytest.fixture
def storage_kind(request: pytest.FixtureRequest) -> str:
    """``folder`` unless a test parametrizes it (indirect) over STORAGES."""
    return str(getattr(request, "param", "folder"))


@pytest.fixture
def storage_url(
    request: pytest.FixtureRequest, storage_kind: str, monkeypatch: pytest.MonkeyPatch
) -> str | None:
    """SPEECHBATCH_STORAGE_URL for the test: None (the folder) or a fresh bucket, with the
    standard AWS variables pointing at the session's SeaweedFS (``s3``) or moto (``moto``)."""
    if storage_kind == "folder":
        return None
    server: LocalS3 = request.getfixturevalue("moto" if storage_kind == "moto" else "seaweed")
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    return f"s3://{server.new_bucket()}/speechbatch"


@pytest.fixture
def settings(database_url: str, tmp_path: Path, storage_url: str | None) -> Settings:
    """Settings for tests: short timeouts, a lease that validation accepts."""
    return Settings(
        database_url=database_url,
        secret_key="test-secret",
        storage_dir=str(tmp_path / "audio"),
        storage_url=storage_url,
        tts_timeout_seconds=1.0,
        tts_max_attempts=2,
        lease_seconds=30.0,
        worker_dead_seconds=30.0,
        item_concurrency=4,
        tts_voices=("alloy", "echo"),
    ).validate()


@pytest.fixture
def provider() -> FakeProvider:
    """A fake provider that counts calls."""
    return FakeProvider()


@pytest.fixture
def app(settings: Settings, provider: FakeProvider) -> Iterator[Flask]:
    """The app on a fresh database with the fake provider."""
    yield from app_for_tests(settings, provider)


def app_for_tests(settings: Settings, provider: TTSProvider) -> Iterator[Flask]:
    """An app for the test client, closed when the fixture that yields it ends."""
    app = create_app(settings, provider=provider)
    app.config["TESTING"] = True
    yield app
    close_services(services(app))


@pytest.fixture
def make_svc(settings: Settings, provider: FakeProvider) -> Iterator[Callable[..., Services]]:
    """Build more apps (as more processes would be) with changed settings, on the test's
    database and provider; each is drained and closed after the test."""
    built: list[Services] = []

    def make(**changes: Any) -> Services:
        svc = services(create_app(with_settings(settings, **changes), provider=provider))
        built.append(svc)
        return svc

    yield make
    for svc in built:
        close_services(svc)


# How long a test's teardown waits for its render and export builders to end.
BUILDERS_SECONDS = 20.0


def close_services(svc: Services) -> None:
    """Drain the app's runner, let this process's render and export builders end, and
    close both its engines (no connection left to GC): a builder that outlived its test
    would connect again after the dispose, and that connection, never closed, would fail
    a later test when the garbage collector found it."""
    svc.runner.drain(5.0)
    wait_for_renders(BUILDERS_SECONDS)
    wait_for_exports(BUILDERS_SECONDS)
    svc.dispose()


def services(app: Flask) -> Services:
    """The app's services."""
    return app.extensions["speechbatch"]


@pytest.fixture
def svc(app: Flask) -> Services:
    """The app's services."""
    return services(app)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """A test client."""
    return app.test_client()


@pytest.fixture
def admin(svc: Services) -> UserRecord:
    """An admin in organization acme."""
    return new_admin(svc, "acme", "admin@acme.test")


@pytest.fixture
def token(svc: Services, admin: UserRecord) -> str:
    """An API token of the admin."""
    return create_token(svc.uow_factory, admin.email)


@pytest.fixture
def auth(token: str) -> dict[str, str]:
    """Headers that authenticate as the admin."""
    return {"Authorization": f"Bearer {token}"}


def with_settings(settings: Settings, **changes: Any) -> Settings:
    """A copy of settings with changes, validated."""
    return replace(settings, **changes).validate()
