"""Fixtures for process-level tests: a fake provider, a fresh database, real gunicorn servers.

Every test under tests/e2e gets the ``e2e`` marker. A test that asks for ``db_kind`` runs on
SQLite and on PostgreSQL; when PostgreSQL is unreachable its variant is skipped, or fails
when ``CI=true``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

from tests.support.fake_provider import FakeProvider
from tests.support.server import (
    ApiClient,
    GunicornServer,
    app_env,
    bootstrap,
    copy_sqlite_database,
    drop_pg_database,
    make_pg_database,
    pg_database_name,
    sqlite_url,
)
from tests.support.worker_process import WorkerProcess
from tests.support.workers import E2E_GROUP, E2E_PAGES_GROUP, in_process_group

E2E_DIR = Path(__file__).resolve().parent
BACKENDS = ["sqlite", "postgresql"]
DEFAULT_LATENCY = 0.3

ServerFactory = Callable[..., GunicornServer]
Metric = Callable[[str, Any], None]


# The tests of pages and of the HTTP interface (a browser, a client, a fuzzer, a proxy):
# their own xdist group, beside the one of crashes, signals and paced calls, whose time
# budgets are what a third process-heavy test at once would strain.
PAGE_MODULES = frozenset(
    {
        "test_browser", "test_browser_cast", "test_browser_edits", "test_generated_client",
        "test_import_page", "test_job_page_live", "test_lexicon_page", "test_openapi_fuzz",
        "test_pages_anywhere", "test_publish_page", "test_quickstart", "test_render_page",
        "test_reverse_proxy", "test_webhooks_page",
    }
)  # fmt: skip


# tryfirst: before xdist reads the group marker (see in_process_group).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of this directory ``e2e``, in one of the end-to-end tests' xdist
    groups: the pages' or the processes'."""
    for item in items:
        path = Path(item.path).resolve()
        if E2E_DIR in path.parents:
            item.add_marker(pytest.mark.e2e)
            in_process_group(item, E2E_PAGES_GROUP if path.stem in PAGE_MODULES else E2E_GROUP)


@pytest.fixture(params=BACKENDS)
def db_kind(request: pytest.FixtureRequest) -> str:
    """The database backend of this test run: ``sqlite`` or ``postgresql``."""
    return str(request.param)


class DatabaseTemplates:
    """One database per backend, migrated and bootstrapped once by the CLI (db upgrade,
    create-admin, create-token); each test gets a copy, so its token is valid in every copy.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: dict[str, tuple[str, str]] = {}

    def get(self, kind: str) -> tuple[str, str]:
        """(template URL, API token) of ``kind``, bootstrapping it on first use."""
        if kind not in self._made:
            directory = self.root / kind
            directory.mkdir(parents=True, exist_ok=True)
            url = sqlite_url(directory) if kind == "sqlite" else make_pg_database("sb_e2e_tmpl")
            # The provider is never called by the CLI; the URL only has to be valid.
            env = app_env(url, "http://127.0.0.1:9/v1", directory / "audio")
            try:
                token = bootstrap(env)
            except BaseException:
                if kind != "sqlite":
                    drop_pg_database(url)
                raise
            self._made[kind] = (url, token)
        return self._made[kind]

    def copy(self, kind: str, target_dir: Path) -> tuple[str, str]:
        """A fresh database copied from the template: (URL, API token)."""
        url, token = self.get(kind)
        if kind == "sqlite":
            return copy_sqlite_database(self.root / kind, target_dir), token
        return make_pg_database(template=pg_database_name(url)), token

    def close(self) -> None:
        """Drop the PostgreSQL template."""
        for kind, (url, _) in self._made.items():
            if kind != "sqlite":
                drop_pg_database(url)
        self._made.clear()


@pytest.fixture(scope="session")
def db_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatabaseTemplates]:
    """The session's bootstrapped template databases."""
    templates = DatabaseTemplates(tmp_path_factory.mktemp("db-templates"))
    try:
        yield templates
    finally:
        templates.close()


@pytest.fixture
def app_database(
    db_kind: str, tmp_path: Path, request: pytest.FixtureRequest, db_templates: DatabaseTemplates
) -> Iterator[tuple[str, str]]:
    """A fresh bootstrapped database of ``db_kind``: (URL, API token of a@example.com).

    A PostgreSQL one is dropped (WITH FORCE) afterwards.
    """
    if db_kind == "postgresql":
        request.getfixturevalue("pg_available")
    url, token = db_templates.copy(db_kind, tmp_path / "db")
    try:
        yield url, token
    finally:
        if db_kind == "postgresql":
            drop_pg_database(url)


@pytest.fixture
def app_database_url(app_database: tuple[str, str]) -> str:
    """The URL of this test's fresh database."""
    return app_database[0]


@pytest.fixture
def db(app_database_url: str) -> Iterator[Engine]:
    """A plain connection to the app's database, to watch (and age) its rows."""
    engine = create_engine(app_database_url, poolclass=NullPool)
    yield engine
    engine.dispose()


@pytest.fixture
def fake_provider() -> Iterator[FakeProvider]:
    """The fake TTS server, answering after DEFAULT_LATENCY seconds (settable)."""
    fake = FakeProvider(latency=DEFAULT_LATENCY, api_key="test-key").start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def env(app_database_url: str, fake_provider: FakeProvider, tmp_path: Path) -> dict[str, str]:
    """The environment every app process of this test gets (same DB, same storage)."""
    return app_env(app_database_url, fake_provider.url, tmp_path / "audio")


@pytest.fixture
def api_token(app_database: tuple[str, str]) -> str:
    """The API token of the admin a@example.com of org acme (made by ``create-token``)."""
    return app_database[1]


@pytest.fixture
def spawn_server(env: dict[str, str], tmp_path: Path, api_token: str) -> Iterator[ServerFactory]:
    """A factory of started gunicorn servers on this test's database.

    ``spawn_server(workers=2, threads=4, name="a", **GunicornServer kwargs)``;
    ``extra_env={...}`` adds variables to this server's environment only. Every server it
    made is SIGKILLed with its whole process group at teardown.
    """
    servers: list[GunicornServer] = []

    def spawn(extra_env: dict[str, str] | None = None, **kwargs: Any) -> GunicornServer:
        kwargs.setdefault("name", f"server{len(servers) + 1}")
        server = GunicornServer({**env, **(extra_env or {})}, tmp_path, **kwargs)
        servers.append(server)
        return server.start()

    try:
        yield spawn
    finally:
        errors = []
        for server in servers:
            try:
                server.stop(graceful=False)
            except Exception as exc:  # keep killing the others
                errors.append(f"{server.name}: {exc}")
        if errors:
            pytest.fail("could not stop every server: " + "; ".join(errors))


@pytest.fixture
def api_for(api_token: str) -> Callable[[GunicornServer], ApiClient]:
    """``api_for(server)`` -> an authenticated ApiClient on that server."""
    return lambda server: ApiClient(server.base_url, api_token)


@pytest.fixture
def metric(request: pytest.FixtureRequest) -> Metric:
    """Record a figure: a user property of the test, a printed line, and a JSON line in the
    file named by SPEECHBATCH_E2E_METRICS if set."""
    target = os.environ.get("SPEECHBATCH_E2E_METRICS")

    def record(name: str, value: Any) -> None:
        request.node.user_properties.append((name, value))
        print(f"E2E-METRIC {name}={value}")
        if target:
            test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"test": test, "name": name, "value": value}) + "\n")

    return record


WorkerFactory = Callable[..., WorkerProcess]


@pytest.fixture
def spawn_worker(env: dict[str, str], tmp_path: Path) -> Iterator[WorkerFactory]:
    """A factory of started ``flask --app wsgi worker`` processes on this test's database.

    ``spawn_worker(name="w1", extra_env={...}, graceful_timeout=...)``; every worker it made
    is SIGKILLed at teardown.
    """
    workers: list[WorkerProcess] = []

    def spawn(extra_env: dict[str, str] | None = None, **kwargs: Any) -> WorkerProcess:
        kwargs.setdefault("name", f"worker{len(workers) + 1}")
        worker = WorkerProcess({**env, **(extra_env or {})}, tmp_path, **kwargs)
        workers.append(worker)
        return worker.start()

    try:
        yield spawn
    finally:
        for worker in workers:
            worker.stop(graceful=False)
