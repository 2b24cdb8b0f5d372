"""A process of the worker tier (``flask --app wsgi worker``), run as an operator would.

Like ``server.py`` it imports nothing of ``speechbatch``: the worker is reached through
its environment (``SPEECHBATCH_RUNNER=worker``), its signals and its log. Each worker runs
in its own session (process group), so a signal reaches it alone.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Mapping
from pathlib import Path

import psutil
import psycopg

from tests.support.processes import LoggedProcess
from tests.support.server import (
    VENV_BIN,
    pid_alive,
    threads_stopped,
    wait_until,
)

# What ``flask --app wsgi worker`` prints once it has loaded the app and serves.
WORKER_READY_LINE = "speechbatch worker serving"
TOOK_LINE = re.compile(r"worker took job=(\d+) attempt=(\d+)")


class WorkerProcess(LoggedProcess):
    """``flask --app wsgi worker`` from the repository root, with its log in a file."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_dir: Path,
        *,
        name: str = "worker",
        graceful_timeout: float = 10.0,
    ) -> None:
        super().__init__({**env, "SPEECHBATCH_RUNNER": "worker"}, log_dir / f"{name}.log", name)
        self.graceful_timeout = graceful_timeout

    def command(self) -> list[str]:
        """The command line."""
        return [
            str(VENV_BIN / "flask"),
            "--app",
            "wsgi",
            "worker",
            "--graceful-timeout",
            f"{self.graceful_timeout:g}",
        ]

    def start(self, timeout: float = 30.0) -> WorkerProcess:
        """Spawn the worker and wait until it serves (it has registered and listens)."""
        self.spawn(self.command())
        try:
            wait_until(
                lambda: WORKER_READY_LINE in self.log_text() or not self.alive,
                timeout,
                what=f"{self.name} serving",
            )
            if not self.alive:
                raise AssertionError(f"{self.name} exited with {self.wait_exit(0)}")
        except BaseException:
            log = self.log_text()
            self.stop(graceful=False)
            raise AssertionError(f"{self.name} did not start; its log:\n{log}") from None
        return self

    @property
    def alive(self) -> bool:
        """Whether the worker is still running."""
        return super().alive and pid_alive(self.pid)

    def took(self, job_id: int) -> bool:
        """Whether this worker's log says it took a run of ``job_id``."""
        return any(int(m[0]) == job_id for m in TOOK_LINE.findall(self.log_text(2_000_000)))

    def freeze(self) -> None:
        """SIGSTOP the worker and wait until every thread of it has stopped."""
        self.kill(signal.SIGSTOP)
        wait_until(lambda: threads_stopped(self.pid), 5, interval=0.002, what=f"{self.name} frozen")

    def freeze_inside_an_item_transaction(self, tries: int = 500) -> list[int]:
        """SIGSTOP the worker at a moment one of its run's threads is idle inside a
        transaction of an item (its last statement names the items, reservations, slots
        or takes), which PostgreSQL then ends after idle_in_transaction_session_timeout
        while the worker sleeps; return those sessions' backend PIDs.

        The runner's transactions are short, so a freeze that lands between two of them
        (or in another loop's, a heartbeat's or a webhook's) is undone and tried again."""
        for attempt in range(1, tries + 1):
            self.freeze()
            backends = self.backends_in_an_item_transaction()
            if backends:
                return backends
            self.kill(signal.SIGCONT)
            time.sleep(0.002 * (attempt % 7))
        raise AssertionError(
            f"{self.name}: no freeze of {tries} landed inside an item's transaction"
        )

    def backends_in_an_item_transaction(self) -> list[int]:
        """The backend PIDs of this worker's PostgreSQL sessions idle in a transaction
        whose last statement is about items."""
        ports = [
            c.laddr.port
            for c in psutil.Process(self.pid).net_connections("tcp")
            if c.raddr and c.raddr.port == 5432
        ]
        return _backends(
            self.env["SPEECHBATCH_DATABASE_URL"],
            "client_port = ANY(%s) AND state = 'idle in transaction' AND query ~*"
            r" '\m(items|reservations|provider_slots|provider_pace|takes)\M'",
            [ports],
        )

    def stop(self, *, graceful: bool = True) -> int | None:
        """Stop the worker (SIGTERM, then SIGKILL after the grace period); its exit code."""
        if self.proc is None:
            return None
        try:
            if graceful and self.proc.poll() is None:
                self.kill(signal.SIGCONT)
                self.kill(signal.SIGTERM)
                self.wait_exit(self.graceful_timeout + 5.0)
            if self.proc.poll() is None:
                self.kill(signal.SIGKILL)
                self.proc.wait(10)
        finally:
            self._close_log()
        return self.proc.returncode


def backends_alive(database_url: str, pids: list[int]) -> list[int]:
    """Which of these PostgreSQL backends still serve a session."""
    return _backends(database_url, "pid = ANY(%s)", [pids])


def _backends(database_url: str, where: str, params: list[object]) -> list[int]:
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT pid FROM pg_stat_activity WHERE {where}", params)
        return [int(r[0]) for r in rows.fetchall()]
