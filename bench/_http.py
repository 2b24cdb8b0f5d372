"""Helpers of the benchmarks that go through the HTTP contract: gunicorn, wrk, a fake provider.

Nothing here imports ``speechbatch``: the app is started as ``gunicorn wsgi:app`` from the
repository root on a fresh PostgreSQL database bootstrapped by the CLI (the test suite's
``tests.support.server`` helpers), so the same script measures any commit of the code.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from _common import BENCH_DIR, ROOT
from tests.support.fake_provider import RemoteFakeProvider
from tests.support.server import (
    ApiClient,
    GunicornServer,
    app_env,
    bootstrap,
    drop_pg_database,
    make_pg_database,
)

# Counts the answers by status code (wrk's own summary does not tell a 304 from a 200)
# and prints them on one line ``STATUS 200=n 304=m`` when the run ends.
STATUS_SCRIPT = BENCH_DIR / "wrk_status.lua"


@dataclass
class App:
    """A running ``gunicorn wsgi:app`` and an authenticated API client on it."""

    server: GunicornServer
    api: ApiClient
    token: str

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return self.server.base_url


@contextlib.contextmanager
def fake_provider_process(latency: float) -> Iterator[RemoteFakeProvider]:
    """The fake TTS server in a process of its own (so that this one's GIL stays out of it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_provider", "--latency", f"{latency:g}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().strip())
        yield RemoteFakeProvider(port)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def gunicorn_app(
    provider_url: str, *, workers: int = 1, threads: int = 4, **settings: str | float | int
) -> Iterator[App]:
    """``gunicorn wsgi:app -w WORKERS --threads THREADS`` on a fresh PostgreSQL database."""
    url = make_pg_database("sb_bench")
    tmp = Path(tempfile.mkdtemp(prefix="sb_bench_http_"))
    server: GunicornServer | None = None
    try:
        env = app_env(url, provider_url, tmp / "audio", **settings)
        token = bootstrap(env)
        server = GunicornServer(env, tmp, workers=workers, threads=threads, name="bench").start()
        yield App(server, ApiClient(server.base_url, token, timeout=60), token)
    finally:
        if server is not None:
            server.stop(graceful=True)
        drop_pg_database(url)


def wait_status(app: App, job_id: int, statuses: tuple[str, ...], timeout: float) -> Any:
    """Poll the job's summary every 0.2 s until its status is one of ``statuses``."""
    deadline = time.monotonic() + timeout
    while True:
        # ``?items=none`` is ignored by code that predates it: then this is a full read.
        job = app.api.request("GET", f"/api/jobs/{job_id}?items=none").json()
        if job["status"] in statuses:
            return job
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {job['status']} after {timeout:g} s")
        time.sleep(0.2)


def run_job(app: App, texts: list[str], timeout: float = 600) -> int:
    """Create a job through the API and run it to COMPLETED; its id."""
    job = app.api.create_job(texts, title=f"bench {len(texts)} items")
    response = app.api.generate(job["id"])
    assert response.status_code == 202, response.text
    done = wait_status(app, job["id"], ("COMPLETED", "FAILED"), timeout)
    assert done["status"] == "COMPLETED", done
    return int(job["id"])


def etag_of(app: App, path: str) -> str | None:
    """The ETag the server sends for ``path`` (None if it sends none)."""
    response = app.api.request("GET", path)
    response.raise_for_status()
    return response.headers.get("ETag")


def wrk(url: str, duration: float, connections: int, headers: list[str]) -> dict[str, Any]:
    """One ``wrk -t2`` run with the status-counting script; its figures."""
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{duration:g}s", "--latency"]
    cmd += ["-s", str(STATUS_SCRIPT)]
    for h in headers:
        cmd += ["-H", h]
    out = subprocess.run(
        [*cmd, url], capture_output=True, text=True, check=True, timeout=duration + 30
    ).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if rps is None:
        raise RuntimeError(f"wrk printed no rate:\n{out}")
    statuses = re.search(r"^STATUS(.*)$", out, re.M)
    counts = {}
    if statuses:
        for pair in statuses.group(1).split():
            code, n = pair.split("=")
            counts[code] = int(n)
    errors = re.search(r"Socket errors:.*", out)
    p50 = re.search(r"\s50%\s+([\d.]+\w+)", out)
    p99 = re.search(r"\s99%\s+([\d.]+\w+)", out)
    return {
        "requests_per_second": float(rps.group(1)),
        "statuses": counts,
        "socket_errors": errors.group(0) if errors else None,
        "latency_p50": p50.group(1) if p50 else None,
        "latency_p99": p99.group(1) if p99 else None,
    }


def response_bytes(app: App, path: str) -> int:
    """The size of one answer's body."""
    response = requests.get(app.base_url + path, headers=auth_header(app.token), timeout=60)
    return len(response.content)


def auth_header(token: str) -> dict[str, str]:
    """The bearer header as a dict."""
    return {"Authorization": f"Bearer {token}"}
