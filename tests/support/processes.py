"""A process run as an operator would: from the repository root, in a session (process
group) of its own, its output in a log file. ``server.py``'s gunicorn and
``worker_process.py``'s worker are such processes."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import IO

REPO_ROOT = Path(__file__).resolve().parents[2]


class LoggedProcess:
    """One command, started by ``spawn``; its output goes to ``log_path``."""

    def __init__(self, env: Mapping[str, str], log_path: Path, name: str) -> None:
        self.env = dict(env)
        self.log_path = log_path
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        """The process's PID (also its process group id)."""
        if self.proc is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.proc.pid

    def spawn(self, command: list[str]) -> None:
        """Start ``command``, its output appended to the log after a line that names it."""
        self._close_log()
        self._log = self.log_path.open("ab")
        self._log.write(f"\n===== start {' '.join(command)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int) -> None:
        """Send ``sig`` to the process only."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code, or None if the process still runs after ``timeout``."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def log_text(self, tail: int = 20_000) -> str:
        """The last ``tail`` characters of the process's combined stdout and stderr."""
        if self._log is not None:
            self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except FileNotFoundError:
            return ""

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
