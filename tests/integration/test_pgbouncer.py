"""Behind PgBouncer in transaction mode, with the setting docs/architecture.md gives.

Runs where a ``pgbouncer`` binary is installed (Debian: ``apt-get install pgbouncer``),
skips elsewhere. The PgBouncer is started for the test on a free port, in front of the
test's database.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from speechbatch.adapters import db
from speechbatch.adapters.uow import SessionUowFactory
from tests.conftest import IN_CI

pytestmark = pytest.mark.parametrize("backend", ["postgresql"])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def pgbouncer_url(database_url: str, tmp_path: Path) -> Iterator[str]:
    """``database_url`` through a PgBouncer in transaction mode with two server connections
    (so that a client's transactions move between them)."""
    binary = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if binary is None:
        if IN_CI:
            pytest.fail("pgbouncer is required under CI (bin/test installs it)")
        pytest.skip("pgbouncer is not installed")
    url = make_url(database_url)
    port = _free_port()
    folder = tmp_path / "pgbouncer"
    folder.mkdir()
    (folder / "users.txt").write_text(f'"{url.username}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n* = host={url.host} port={url.port or 5432}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\npool_mode = transaction\n"
        "default_pool_size = 2\nignore_startup_parameters = options\n"
    )
    # PgBouncer refuses to run as root; it reads its files before it changes user.
    as_user = ["-u", "nobody"] if os.geteuid() == 0 else []
    process = subprocess.Popen(
        [binary, *as_user, str(folder / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail("pgbouncer did not start")
                time.sleep(0.05)
        yield url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    finally:
        process.terminate()
        process.wait(10)


def test_runs_behind_pgbouncer_in_transaction_mode_with_prepare_threshold_none(
    pgbouncer_url: str,
) -> None:
    """Many short units of work from several threads, each statement run far more often
    than psycopg's threshold: none fails (with psycopg's default, an older PgBouncer
    answers "prepared statement ... already exists")."""
    engine = db.make_engine(pgbouncer_url + "?prepare_threshold=none")
    uow_factory = SessionUowFactory(db.make_session_factory(engine))
    errors: list[BaseException] = []

    def work() -> None:
        for n in range(25):
            try:
                with uow_factory() as uow:
                    assert uow.session.execute(text("SELECT 41 + :n"), {"n": n}).scalar() == 41 + n
                    uow.commit()
                with uow_factory(read_only=True) as reader:
                    assert reader.session.execute(text("SELECT count(*) FROM jobs")).scalar() == 0
            except BaseException as error:
                errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        engine.dispose()
    assert errors == []
