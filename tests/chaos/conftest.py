"""Fixtures of the chaos suite: one bootstrapped PostgreSQL database for the whole folder,
a per-text programmable fake provider, real gunicorn servers, the seed and the summary.

Every test of this folder gets the ``chaos`` marker. PostgreSQL is required: unreachable, the
suite is skipped, or fails under ``CI=true``. ``CHAOS_SEED=N`` replays a randomized session;
``CHAOS_RUNS=N`` changes the number of crash runs (default 15).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import (
    ApiClient,
    GunicornServer,
    app_env,
    bootstrap,
    drop_pg_database,
    make_pg_database,
)
from tests.support.workers import (
    CHAOS_GROUP,
    in_process_group,
    leave_summary,
    postgresql_stopped,
)

from .chaos_provider import ChaosFakeProvider
from .harness import (
    THREADS,
    WORKERS,
    ChaosReport,
    Database,
    Observer,
    chaos_env,
    ensure_pg_running,
    local_cluster,
)

CHAOS_DIR = Path(__file__).resolve().parent
REPORT_KEY = pytest.StashKey[ChaosReport]()
FAKE_API_KEY = "test-key"

Spawn = Callable[..., GunicornServer]


# tryfirst: before xdist reads the group marker (see in_process_group).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of this directory ``chaos``, in the process tests' xdist group."""
    for item in items:
        if CHAOS_DIR in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.chaos)
            in_process_group(item, CHAOS_GROUP)


def _summary(report: ChaosReport) -> str:
    title = " chaos summary "
    return f"{title:=^88}\n{report.render()}\n"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Leave the chaos summary table to be printed at the end (with or without ``-s``,
    serial or on an xdist worker)."""
    report = session.config.stash.get(REPORT_KEY, None)
    if report is not None and report.rows:
        leave_summary(session.config, _summary(report))


@pytest.fixture
def postgresql_to_itself() -> Iterator[None]:
    """For a test that stops the PostgreSQL server: no test of another worker uses it
    meanwhile (taken before the test starts its job, so waiting does not change its run)."""
    with postgresql_stopped():
        yield


@pytest.fixture(scope="session")
def chaos_seed() -> int:
    """The session's seed: CHAOS_SEED, or a fresh one (printed, so a failure can be replayed)."""
    value = os.environ.get("CHAOS_SEED", "").strip()
    seed = int(value) if value else random.SystemRandom().randrange(1, 2**31)
    print(f"\nCHAOS_SEED={seed}")
    return seed


@pytest.fixture(scope="session")
def chaos_report(
    request: pytest.FixtureRequest, chaos_seed: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChaosReport]:
    """The summary table; written to <pytest tmp>/chaos-summary.txt and printed at the end."""
    report = ChaosReport(seed=chaos_seed)
    request.config.stash[REPORT_KEY] = report
    path = tmp_path_factory.getbasetemp() / "chaos-summary.txt"
    report.figures["summary file"] = str(path)
    try:
        yield report
    finally:
        text = report.render()
        path.write_text(text + "\n", encoding="utf-8")
        print("\n" + text)


@pytest.fixture(scope="session")
def chaos_db(
    pg_available: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """One migrated, bootstrapped PostgreSQL database for the folder: (URL, API token).

    Every test makes its own jobs with unique texts, so they can share it (bootstrapping
    takes about 6 s of CLI runs). Dropped WITH (FORCE) at the end, PostgreSQL started first
    if a test left it stopped.
    """
    url = make_pg_database("sb_chaos")
    try:
        directory = tmp_path_factory.mktemp("chaos-bootstrap")
        env = app_env(url, "http://127.0.0.1:9/v1", directory / "audio")
        token = bootstrap(env)
        yield url, token
    finally:
        cluster = local_cluster()
        if cluster is not None:
            ensure_pg_running(cluster)
        drop_pg_database(url)


@pytest.fixture
def fake() -> Iterator[ChaosFakeProvider]:
    """A per-text programmable fake provider (100 ms latency), stopped after the test."""
    provider = ChaosFakeProvider(latency=0.1, api_key=FAKE_API_KEY).start()
    try:
        yield provider
    finally:
        provider.stop()


def _stop_all(servers: list[GunicornServer]) -> list[str]:
    errors = []
    for server in servers:
        try:
            server.stop(graceful=False)  # SIGKILL of the whole group, frozen ones included
        except Exception as exc:  # keep stopping the others
            errors.append(f"{server.name}: {exc}")
    return errors


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """``spawn(env, name=...)``: a started gunicorn (2 workers x 2 threads) killed at teardown."""
    servers: list[GunicornServer] = []

    def make(env: dict[str, str], **kwargs: Any) -> GunicornServer:
        kwargs.setdefault("name", f"server{len(servers) + 1}")
        kwargs.setdefault("workers", WORKERS)
        kwargs.setdefault("threads", THREADS)
        server = GunicornServer(env, tmp_path, **kwargs)
        servers.append(server)
        return server.start()

    try:
        yield make
    finally:
        errors = _stop_all(servers)
        if errors:
            pytest.fail("could not stop every server: " + "; ".join(errors))


@dataclass
class Stack:
    """One fake, one server, one storage directory for the fault scenarios."""

    url: str
    token: str
    fake: ChaosFakeProvider
    server: GunicornServer
    storage: Path
    db: Database
    seed: int
    env: dict[str, str]

    def observer(self, context: str) -> Observer:
        """A fresh observer on the server."""
        return Observer(ApiClient(self.server.base_url, self.token), self.fake, context)


# The fault scenarios' server, shared by the tests of one module (provider faults,
# storage, spending: each module starts its own). test_faults.py's own ``stack`` (a
# FaultStack) overrides this fixture there.
@pytest.fixture(scope="module")
def stack(
    chaos_db: tuple[str, str], tmp_path_factory: pytest.TempPathFactory, chaos_seed: int
) -> Iterator[Stack]:
    """The fault scenarios' server (2 workers x 2 threads) and fake (50 ms latency)."""
    url, token = chaos_db
    directory = tmp_path_factory.mktemp("chaos-faults")
    fake = ChaosFakeProvider(latency=0.05, api_key=FAKE_API_KEY).start()
    server: GunicornServer | None = None
    try:
        env = chaos_env(url, fake.url, directory / "audio")
        server = GunicornServer(env, directory, workers=WORKERS, threads=THREADS, name="faults")
        server.start()
        yield Stack(url, token, fake, server, directory / "audio", Database(url), chaos_seed, env)
    finally:
        if server is not None:
            server.stop(graceful=False)
        fake.stop()
