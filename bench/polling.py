"""Polling benchmark: GET /api/jobs/ID (a COMPLETED 50-item job) against GET /healthz.

Drives ``wrk`` against ``gunicorn wsgi:app -w 2 --threads 4`` on a fresh PostgreSQL
database. The token is made with ``flask --app wsgi create-token`` and sent with
``-H "Authorization: Bearer ..."``. The job read includes the recovery check (every
GET runs ``services.recover_stale`` first). Runs alternate healthz / job, several each,
and medians are compared: target job req/s >= 0.5 x healthz req/s.

Usage: python bench/polling.py [--rounds 3] [--duration 8] [--connections 8]
Needs wrk (apt-get install -y wrk).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

from _common import (
    ROOT,
    bench_settings,
    fake_provider,
    fresh_database,
    median,
    print_table,
    verdict,
    write_results,
)

from speechbatch import create_app
from speechbatch import services as svc
from speechbatch.app import Services

TARGET = 0.5
VENV_BIN = ROOT / ".venv" / "bin"
EMAIL = "bench@bench.test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _flask(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [str(VENV_BIN / "flask"), "--app", "wsgi", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout


def _completed_job(url: str, storage: str, items: int) -> int:
    """Create and run a job to COMPLETED in this process (fake provider)."""
    from batch import wait_for_runs

    settings = bench_settings(url, storage)
    app = create_app(settings, provider=fake_provider())
    services: Services = app.extensions["speechbatch"]
    try:
        with services.uow_factory() as uow:
            user = uow.repo.get_user_by_email(EMAIL)
        assert user is not None
        texts = [f"sentence number {i} of the polled job" for i in range(items)]
        job_id = svc.create_job(
            services.uow_factory, user, "polled", "alloy", texts, services.limits
        )
        svc.start_generation(services.uow_factory, settings, services.runner, user, job_id)
        wait_for_runs(services, timeout=60)
        view = svc.get_job(services.uow_factory, settings, user, job_id)
        assert view["status"] == "COMPLETED" and len(view["items"]) == items
    finally:
        services.runner.drain(5.0)
        services.engine.dispose()
    return job_id


def _wrk(url: str, duration: float, connections: int, headers: list[str]) -> dict[str, Any]:
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{duration:g}s", "--latency"]
    for h in headers:
        cmd += ["-H", h]
    out = subprocess.run(
        [*cmd, url], capture_output=True, text=True, check=True, timeout=duration + 30
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    p50 = re.search(r"\s50%\s+([\d.]+\w+)", out)
    p99 = re.search(r"\s99%\s+([\d.]+\w+)", out)
    return {
        "requests_per_second": rps,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": errors.group(0) if errors else None,
        "latency_p50": p50.group(1) if p50 else None,
        "latency_p99": p99.group(1) if p99 else None,
    }


def _wait_healthy(base: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("gunicorn exited during start")
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError("gunicorn did not become healthy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--items", type=int, default=50)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is missing: apt-get install -y wrk")
    logging.disable(logging.INFO)
    results: dict[str, Any] = {"params": vars(args), "target_ratio": TARGET}
    with fresh_database("postgresql", "polling") as url, tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "SPEECHBATCH_DATABASE_URL": url,
            "SPEECHBATCH_STORAGE_DIR": tmp,
            "SPEECHBATCH_SECRET_KEY": "bench-secret",
        }
        _flask(env, "create-admin", "--org", "bench", "--email", EMAIL, "--password", "password-1")
        token = _flask(env, "create-token", "--email", EMAIL).strip().splitlines()[-1]
        job_id = _completed_job(url, tmp, args.items)
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [str(VENV_BIN / "gunicorn"), "wsgi:app", "-w", "2", "--threads", "4",
             "-b", f"127.0.0.1:{port}", "--log-level", "warning"],
            cwd=ROOT, env=env,
        )  # fmt: skip
        try:
            _wait_healthy(base, proc)
            auth = f"Authorization: Bearer {token}"
            req = urllib.request.Request(f"{base}/api/jobs/{job_id}", headers={
                "Authorization": f"Bearer {token}"})  # fmt: skip
            with urllib.request.urlopen(req, timeout=5) as r:
                body = json.loads(r.read())
            assert body["status"] == "COMPLETED" and len(body["items"]) == args.items
            results["job_response_bytes"] = len(json.dumps(body))
            targets = {
                "healthz": (f"{base}/healthz", []),
                "job": (f"{base}/api/jobs/{job_id}", [auth]),
            }
            for target, headers in targets.values():  # warm up both
                _wrk(target, 2, args.connections, headers)
            runs: dict[str, list[dict[str, Any]]] = {"healthz": [], "job": []}
            for i in range(args.rounds):
                order = ["healthz", "job"] if i % 2 == 0 else ["job", "healthz"]
                for name in order:
                    target, headers = targets[name]
                    r = _wrk(target, args.duration, args.connections, headers)
                    runs[name].append(r)
                    print(f"round {i + 1} {name}: {r['requests_per_second']:.0f} req/s", flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    results["runs"] = runs
    med = {k: median([r["requests_per_second"] for r in v]) for k, v in runs.items()}
    bad = sum(r["non_2xx"] for v in runs.values() for r in v)
    results["median_requests_per_second"] = med
    results["ratio"] = med["job"] / med["healthz"]
    results["non_2xx_total"] = bad
    results["pass"] = results["ratio"] >= TARGET and bad == 0
    print_table(
        f"Polling: wrk -t2 -c{args.connections} -d{args.duration:g}s against gunicorn -w 2 "
        f"--threads 4 ({args.rounds} alternating runs each; target ratio >= {TARGET})",
        ["endpoint", "runs req/s", "median req/s", "p50 latency (runs)", "non-2xx"],
        [
            [
                name,
                " ".join(f"{r['requests_per_second']:.0f}" for r in runs[name]),
                med[name],
                " ".join(str(r["latency_p50"]) for r in runs[name]),
                sum(r["non_2xx"] for r in runs[name]),
            ]
            for name in ("healthz", "job")
        ],
    )
    print(f"\njob / healthz = {results['ratio']:.3f}  {verdict(results['pass'])}")
    write_results("polling", results)


if __name__ == "__main__":
    main()
