"""/metrics under gunicorn with two workers in multiprocess mode: every scrape, whichever
worker answers it, counts the work of both workers, and of a worker that has since ended.

Every request goes on a fresh connection, so consecutive requests land on either worker;
gunicorn's access log says which one answered.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import requests

from tests.e2e.conftest import ServerFactory
from tests.support.server import ApiClient, GunicornServer, wait_until

ACCESS_LOG = ("--access-logfile", "-", "--access-logformat", "answered-by %(p)s %(m)s %(U)s %(s)s")
MAX_TRIES = 40  # fresh connections until both workers have answered (each one is checked)
FRESH = {"Connection": "close"}


def _answered_by(server: GunicornServer, method: str, path_pattern: str) -> set[str]:
    """The worker PIDs that have answered ``method`` on paths matching ``path_pattern``."""
    pattern = re.compile(rf"answered-by <?(\d+)>? {method} {path_pattern} ")
    return set(pattern.findall(server.log_text(2_000_000)))


def _scrape(server: GunicornServer) -> dict[str, float]:
    """One scrape: every sample by its name and labels, e.g. 'x_total{result="won"}'."""
    response = requests.get(f"{server.base_url}/metrics", headers=FRESH, timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"].count("charset=") == 1
    samples = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def _jobs_generated_on_both_workers(server: GunicornServer, api: ApiClient) -> list[int]:
    """One-item jobs, each generated on a fresh connection, until both workers claimed."""
    job_ids: list[int] = []
    for n in range(MAX_TRIES):
        job_id = api.create_job([f"line {n}"], title=f"metrics {n}")["id"]
        assert api.generate(job_id).status_code == 202
        job_ids.append(job_id)
        if len(_answered_by(server, "POST", r"/api/jobs/\d+/generate")) == 2:
            return job_ids
    raise AssertionError(f"{MAX_TRIES} generates reached one worker only")


def _every_scrape_shows(server: GunicornServer, expected: dict[str, float]) -> None:
    """Scrape on fresh connections until both workers have answered one; each shows it."""
    for _ in range(MAX_TRIES):
        samples = _scrape(server)
        assert {k: samples.get(k) for k in expected} == expected
        if len(_answered_by(server, "GET", "/metrics")) == 2:
            return
    raise AssertionError(f"{MAX_TRIES} scrapes reached one worker only")


def test_every_scrape_counts_every_workers_work(
    spawn_server: ServerFactory, api_token: str, tmp_path: Path
) -> None:
    directory = tmp_path / "prometheus"
    directory.mkdir()
    server = spawn_server(
        workers=2,
        threads=2,
        extra_env={"PROMETHEUS_MULTIPROC_DIR": str(directory)},
        extra_args=ACCESS_LOG,
    )
    api = ApiClient(server.base_url, api_token)
    job_ids = _jobs_generated_on_both_workers(server, api)
    for job_id in job_ids:
        api.wait_job(job_id, lambda job: job["status"] == "COMPLETED", 60, what="completed")
    n = float(len(job_ids))
    expected = {
        'speechbatch_claims_total{result="won"}': n,
        'speechbatch_runs_total{outcome="COMPLETED"}': n,
        'speechbatch_provider_calls_total{status="200"}': n,
        'speechbatch_claims_total{result="refused"}': 0.0,
    }
    _every_scrape_shows(server, expected)

    # A worker that ends (here gracefully; the master respawns it) keeps its work counted.
    gone = set(server.worker_pids())
    server.kill_worker(min(gone), signal.SIGTERM)
    server.wait_for_workers(exclude={min(gone)}, timeout=30)
    wait_until(lambda: len(server.worker_pids()) == 2, 10, what="two workers again")
    for _ in range(6):
        samples = _scrape(server)
        assert {k: samples.get(k) for k in expected} == expected
