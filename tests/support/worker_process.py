"""A process of the worker tier (``flask --app wsgi worker``), run as an operator would.

Like ``server.py`` it imports nothing of ``speechbatch``: the worker is reached through
its environment (``SPEECHBATCH_RUNNER=worker``), its signals and its log. Each worker runs
in its own session (process group), so a signal reaches it alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from tests.support.server import (
    REPO_ROOT,
    VENV_BIN,
    pid_alive,
    threads_stopped,
    wait_until,
)

# What ``flask --app wsgi worker`` prints once it has loaded the app and serves.
WORKER_READY_LINE = "speechbatch worker serving"
TOOK_LINE = re.compile(r"worker took job=(\d+) attempt=(\d+)")


class WorkerProcess:
    """``flask --app wsgi worker`` from the repository root, with its log in a file."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_dir: Path,
        *,
        name: str = "worker",
        graceful_timeout: float = 10.0,
    ) -> None:
        self.env = {**env, "SPEECHBATCH_RUNNER": "worker"}
        self.name = name
        self.graceful_timeout = graceful_timeout
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        """The worker's PID."""
        if self.proc is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.proc.pid

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
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.command(),
            cwd=REPO_ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_until(
                lambda: WORKER_READY_LINE in self.log_text() or not self.alive,
                timeout,
                what=f"{self.name} serving",
            )
            if not self.alive:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}")
        except BaseException:
            log = self.log_text()
            self.stop(graceful=False)
            raise AssertionError(f"{self.name} did not start; its log:\n{log}") from None
        return self

    @property
    def alive(self) -> bool:
        """Whether the worker is still running."""
        return self.proc is not None and self.proc.poll() is None and pid_alive(self.proc.pid)

    def took(self, job_id: int) -> bool:
        """Whether this worker's log says it took a run of ``job_id``."""
        return any(int(m[0]) == job_id for m in TOOK_LINE.findall(self.log_text(2_000_000)))

    def kill(self, sig: int) -> None:
        """Send ``sig`` to the worker."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def freeze(self) -> None:
        """SIGSTOP the worker and wait until every thread of it has stopped."""
        self.kill(signal.SIGSTOP)
        wait_until(lambda: threads_stopped(self.pid), 5, interval=0.002, what=f"{self.name} frozen")

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code, or None if the worker still runs after ``timeout``."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

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
            if self._log is not None:
                self._log.close()
                self._log = None
        return self.proc.returncode

    def log_text(self, tail: int = 20_000) -> str:
        """The last ``tail`` characters of the worker's output."""
        if self._log is not None:
            self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except FileNotFoundError:
            return ""
