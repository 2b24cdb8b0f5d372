"""The app as a deployment runs it: ``gunicorn wsgi:app`` on loopback, its JSON API, and wrk.

Each benchmark that goes through HTTP starts its own server on a fresh PostgreSQL database
(``deployment``) and stops it at the end, whatever happens: the master and its workers are
one process group, sent SIGTERM and then, after the grace period, SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from _common import BENCH_DIR, ROOT, VENV_BIN, app_env, bootstrap, pg_database

# Counts wrk's answers by status (its summary does not tell a 304 from a 200).
STATUS_SCRIPT = BENCH_DIR / "wrk_status.lua"
# gunicorn's access log, one line per request: the worker's pid, the method, the path, the status.
ACCESS_FORMAT = "%(p)s %(m)s %(U)s %(s)s"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Gunicorn:
    """``gunicorn wsgi:app -w WORKERS --threads THREADS`` from the repository root
    (``app``: another module of ``bench/`` that serves the app, e.g. ``wsgi_unmeasured:app``)."""

    def __init__(
        self, env: Mapping[str, str], log_dir: Path, workers: int, threads: int,
        app: str = "wsgi:app",
    ) -> None:  # fmt: skip
        self.port = _free_port()
        self.workers = workers
        self.log_path = log_dir / "gunicorn.log"
        self.access_path = log_dir / "access.log"
        command = [
            str(VENV_BIN / "gunicorn"),
            # Only another app needs bench/ on the path (its modules would shadow nothing, but
            # the product's own app runs as deployed).
            *(["--pythonpath", str(BENCH_DIR)] if app != "wsgi:app" else []),
            app,
            "-w",
            str(workers),
            "--threads",
            str(threads),
            "-b",
            f"127.0.0.1:{self.port}",
            "--access-logfile",
            str(self.access_path),
            "--access-logformat",
            ACCESS_FORMAT,
        ]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=dict(env),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until every worker has loaded the app (gunicorn.conf.py logs each one)."""
        deadline = time.monotonic() + timeout
        while len(set(re.findall(r"worker ready \(pid: (\d+)\)", self.log()))) < self.workers:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn did not start:\n{self.log()[-5000:]}")
            time.sleep(0.1)
        requests.get(f"{self.base_url}/healthz", timeout=10).raise_for_status()

    def log(self) -> str:
        """The server's own log (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    def pids_of(self, method: str, path_pattern: str, status: int) -> list[int]:
        """The workers that answered each request of ``method`` whose path matches, in order."""
        lines = self.access_path.read_text().splitlines()
        found = [line.split() for line in lines]
        return [
            int(f[0].strip("<>"))
            for f in found
            if f[1] == method and re.fullmatch(path_pattern, f[2]) and f[3] == str(status)
        ]

    def stop(self, grace: float = 35.0) -> None:
        """SIGTERM the process group; SIGKILL whatever is left after ``grace`` seconds."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


@dataclass
class Api:
    """An authenticated client of the JSON API (one session per thread that uses it)."""

    base_url: str
    token: str

    def session(self) -> requests.Session:
        """A kept-alive session carrying the bearer token."""
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {self.token}"
        return session

    def call(self, method: str, path: str, json: Any = None, expect: int = 200) -> Any:
        """One call on a connection of its own; its JSON (asserts the status)."""
        with self.session() as session:
            answer = session.request(method, self.base_url + path, json=json, timeout=120)
        if answer.status_code != expect:
            raise RuntimeError(f"{method} {path}: {answer.status_code} {answer.text[:500]}")
        return answer.json() if answer.content else None

    def create_job(self, texts: list[str], title: str) -> int:
        """POST /api/jobs; the new job's id."""
        body = {"title": title, "voice": "alloy", "items": texts}
        return int(self.call("POST", "/api/jobs", body, expect=201)["id"])

    def wait_done(self, job_id: int, timeout: float) -> dict[str, Any]:
        """Read the job every 0.2 s until it is COMPLETED (fails on FAILED or timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            job: dict[str, Any] = self.call("GET", f"/api/jobs/{job_id}")
            if job["status"] == "COMPLETED":
                return job
            if job["status"] == "FAILED" or time.monotonic() > deadline:
                raise RuntimeError(f"job {job_id} is {job['status']}: {job.get('error_message')}")
            time.sleep(0.2)


@dataclass
class Deployment:
    """A running server and an admin's API client on it."""

    server: Gunicorn
    api: Api
    database_url: str = ""  # for a benchmark that sets up rows no API call can make


@contextlib.contextmanager
def deployment(
    provider_url: str,
    *,
    workers: int,
    threads: int = 4,
    app: str = "wsgi:app",
    connect: Callable[[str], dict[str, str]] | None = None,
    **settings: Any,
) -> Iterator[Deployment]:
    """gunicorn on a fresh migrated PostgreSQL database with an admin; stopped at the end.
    ``connect(url)`` gives settings that say how to reach the database of ``url`` (e.g.
    ``{"DATABASE_URL": url + "?prepare_threshold=none"}``); none: the URL itself."""
    with pg_database("http") as url, tempfile.TemporaryDirectory(prefix="sb_bench_") as tmp:
        settings.update(connect(url) if connect else {})
        env = app_env(url, provider_url, Path(tmp) / "audio", **settings)
        token = bootstrap(env)
        server = Gunicorn(env, Path(tmp), workers, threads, app)
        try:
            server.wait_ready()
            yield Deployment(server, Api(server.base_url, token), url)
        finally:
            server.stop()


def wrk(url: str, seconds: float, connections: int, headers: list[str]) -> dict[str, Any]:
    """One ``wrk -t2`` run counting statuses; requests per second and the status counts."""
    command = ["wrk", "-t2", f"-c{connections}", f"-d{seconds:g}s", "-s", str(STATUS_SCRIPT)]
    for header in headers:
        command += ["-H", header]
    out = subprocess.run(
        [*command, url], capture_output=True, text=True, check=True, timeout=seconds + 30
    ).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if rate is None:
        raise RuntimeError(f"wrk printed no rate:\n{out}")
    statuses = re.search(r"^STATUS(.*)$", out, re.M)
    counts = dict(pair.split("=") for pair in statuses.group(1).split()) if statuses else {}
    return {"rps": float(rate.group(1)), "statuses": {k: int(v) for k, v in counts.items()}}
