"""The worker tier behind a real PgBouncer in transaction mode with the README's settings:
a gunicorn web process that claims and a ``flask --app wsgi worker`` that runs, both with
``SPEECHBATCH_DATABASE_URL`` through the session's PgBouncer. Without
``SPEECHBATCH_LISTEN_DATABASE_URL`` the worker polls and says so once; with it the
worker LISTENs over that direct connection. Either way each item is paid once and the
run's webhook event arrives once, DELIVERED.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from tests.support.fake_provider import FakeProvider
from tests.support.pgbouncer import PgBouncer
from tests.support.server import ApiClient, GunicornServer, wait_until
from tests.support.webhook_receiver import Receiver
from tests.support.worker_process import WorkerProcess

from .conftest import ServerFactory, WorkerFactory
from .test_crash_recovery import COMPLETION_TIMEOUT, start_job, summary, wait_settled

pytestmark = pytest.mark.parametrize("db_kind", ["postgresql"])
POLLING_LINE = "goes through a pooler, where LISTEN receives nothing"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A receiver answering 200."""
    r = Receiver()
    yield r
    r.stop()


Deploy = Callable[[bool], tuple[ApiClient, WorkerProcess]]


@pytest.fixture
def deploy(
    spawn_server: ServerFactory,
    spawn_worker: WorkerFactory,
    api_for: Callable[[GunicornServer], ApiClient],
    pgbouncer: PgBouncer,
    app_database_url: str,
) -> Deploy:
    """``deploy(listen)``: a gunicorn web process and a worker, both with the database URL
    through the PgBouncer (and, with ``listen``, the direct URL as the LISTEN database
    URL); the API client of the web process and the worker."""

    def deployed(listen: bool) -> tuple[ApiClient, WorkerProcess]:
        env = {
            "SPEECHBATCH_RUNNER": "worker",
            "SPEECHBATCH_DATABASE_URL": pgbouncer.url(app_database_url),
        }
        if listen:
            env["SPEECHBATCH_LISTEN_DATABASE_URL"] = app_database_url
        server = spawn_server(workers=1, extra_env=env)
        return api_for(server), spawn_worker(extra_env=env)

    return deployed


def _run_and_tell(
    api: ApiClient, receiver: Receiver, fake_provider: FakeProvider, tag: str
) -> None:
    """A job of several items runs to COMPLETED, each item paid once; the webhook of its
    end arrives once and is DELIVERED."""
    hook = api.request("POST", "/api/webhooks", {"url": receiver.url, "events": ["job.completed"]})
    assert hook.status_code == 201, hook.text
    webhook_id = hook.json()["id"]
    job_id, texts = start_job(api, tag, 6)
    job = wait_settled(api, job_id, COMPLETION_TIMEOUT, "the worker ran the job")
    assert job["status"] == "COMPLETED", summary(job)
    assert {t: fake_provider.calls(t) for t in texts} == dict.fromkeys(texts, 1)

    def delivered() -> list[dict[str, object]]:
        found = api.request("GET", f"/api/webhooks/{webhook_id}/deliveries").json()
        return [d for d in found["deliveries"] if d["status"] == "DELIVERED"]

    (delivery,) = api.wait_for(delivered, timeout=20)
    assert delivery["attempts"] == 1 and receiver.count() == 1


def _listening_directly(database_url: str) -> int:
    """Server sessions of this database whose last statement was the worker's LISTEN."""
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query = 'LISTEN speechbatch_runs'"
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_worker_behind_pgbouncer_polls_says_so_once_and_runs(
    deploy: Deploy, app_database_url: str, fake_provider: FakeProvider, receiver: Receiver
) -> None:
    api, worker = deploy(False)
    _run_and_tell(api, receiver, fake_provider, "polled through the pooler")
    assert worker.log_text(2_000_000).count(POLLING_LINE) == 1
    assert _listening_directly(app_database_url) == 0


def test_a_worker_behind_pgbouncer_listens_over_the_listen_database_url(
    deploy: Deploy, app_database_url: str, fake_provider: FakeProvider, receiver: Receiver
) -> None:
    api, worker = deploy(True)
    wait_until(lambda: _listening_directly(app_database_url) == 1, 10, what="the worker listens")
    _run_and_tell(api, receiver, fake_provider, "woken through a direct connection")
    assert POLLING_LINE not in worker.log_text(2_000_000)
