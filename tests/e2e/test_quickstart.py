"""The README's first command on a fresh clone, then a first session in a real browser.

``git clone`` of this repository's committed HEAD into a temporary folder, then
``bash bin/quickstart --port FREE`` exactly as the README says (it makes its own .venv
and installs; pip's cache makes that quick). With the printed credentials, Chromium signs
in, creates a job, generates it and plays its audio. Every request reaches gunicorn's two
workers on a new connection (through a proxy), and any Content-Security-Policy violation
fails the test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from playwright.sync_api import expect, sync_playwright

from tests.e2e.conftest import Metric
from tests.e2e.test_browser import CHROMIUM, CHROMIUM_ARGS, play_first_audio, require_chromium
from tests.support.csp import CspWatch
from tests.support.fresh_proxy import FreshConnectionProxy
from tests.support.server import (
    API_TOKEN_LINE,
    REPO_ROOT,
    SIGN_IN_LINE,
    free_port,
    group_pids,
    wait_until,
)

INSTALL_TIMEOUT = 600.0


@dataclass
class QuickStart:
    """The running quick start: its URL and what it printed."""

    base_url: str
    folder: Path
    email: str
    password: str
    token: str
    seconds_to_ready: float
    output: list[str]


def _read(stream: object, lines: list[str]) -> None:
    for line in iter(stream.readline, ""):  # type: ignore[attr-defined]
        lines.append(line)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuickStart]:
    """``bash bin/quickstart --port N`` on a fresh clone, until it answers /healthz."""
    require_chromium()
    clone = tmp_path_factory.mktemp("clone") / "speechbatch"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True, timeout=120)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPEECHBATCH_", "VIRTUAL_ENV"))}
    started = time.monotonic()
    process = subprocess.Popen(
        ["bash", "bin/quickstart", "--port", str(port)],
        cwd=clone,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output: list[str] = []
    reader = threading.Thread(target=_read, args=(process.stdout, output), daemon=True)
    reader.start()
    base_url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"quickstart exited {process.returncode}:\n{''.join(output)}")
        try:
            return requests.get(f"{base_url}/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_until(healthy, INSTALL_TIMEOUT, interval=0.5, what="quickstart healthy")
        text = "".join(output)
        sign_in, token = SIGN_IN_LINE.search(text), API_TOKEN_LINE.search(text)
        assert sign_in and token, text
        yield QuickStart(
            base_url,
            clone,
            sign_in[1],
            sign_in[2],
            token[1],
            time.monotonic() - started,
            output,
        )
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        wait_until(lambda: not group_pids(process.pid), 10.0, what="quickstart gone")
        reader.join(10)
        assert process.stdout is not None
        process.stdout.close()


def test_quickstart_runs_several_workers_on_one_private_key(quickstart: QuickStart) -> None:
    workers = re.findall(r"Booting worker with pid: (\d+)", "".join(quickstart.output))
    assert len(workers) >= 2, "".join(quickstart.output)
    key = quickstart.folder / "instance" / "secret_key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_metrics_count_into_one_folder_for_every_worker(quickstart: QuickStart) -> None:
    # Multiprocess mode: every worker counts into instance/prometheus (emptied by
    # bin/quickstart), and every scrape sums the folder, whichever worker answers it
    # (tests/e2e/test_metrics_workers.py checks the sums).
    workers = re.findall(r"Booting worker with pid: (\d+)", "".join(quickstart.output))
    folder = quickstart.folder / "instance" / "prometheus"
    setting = f"PROMETHEUS_MULTIPROC_DIR={folder.resolve()}".encode()
    for pid in workers:
        assert setting in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"), pid
    assert list(folder.glob("counter_*.db"))
    answer = requests.get(
        f"{quickstart.base_url}/metrics", headers={"Connection": "close"}, timeout=10
    )
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].count("charset=") == 1


def test_the_readmes_api_example_works_on_the_quick_start(quickstart: QuickStart) -> None:
    # The README's first API example as written (its voice), on the port the quick start
    # was given; the database file the README names is the one the quick start made.
    readme = (quickstart.folder / "README.md").read_text()
    body = json.loads(re.findall(r"-d '(\{[^']*\})'", readme)[0])
    answer = requests.post(
        f"{quickstart.base_url}/api/jobs",
        json=body,
        headers={"Authorization": f"Bearer {quickstart.token}", "Connection": "close"},
        timeout=10,
    )
    assert answer.status_code == 201, answer.text
    named = re.search(r"migrates `([^`]+)`", readme)
    assert named is not None and (quickstart.folder / named[1]).is_file()
    printed = re.search(r"database : (\S+)", "".join(quickstart.output))
    assert printed and printed[1] == f"sqlite:///{(quickstart.folder / named[1]).resolve()}"


def test_printed_token_works(quickstart: QuickStart) -> None:
    answer = requests.get(
        f"{quickstart.base_url}/api/jobs",
        headers={"Authorization": f"Bearer {quickstart.token}", "Connection": "close"},
        timeout=10,
    )
    assert answer.status_code == 200


def test_first_session_in_a_browser(quickstart: QuickStart, metric: Metric) -> None:
    metric("quickstart_seconds_to_ready", round(quickstart.seconds_to_ready, 1))
    port = int(quickstart.base_url.rsplit(":", 1)[1])
    with FreshConnectionProxy(port) as proxy, sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            context = browser.new_context(base_url=proxy.base_url)
            context.set_default_timeout(20_000)
            csp = CspWatch(context)
            page = context.new_page()
            page.goto("/")
            expect(page).to_have_url(re.compile(r"/login"))
            page.fill("#email", quickstart.email)
            page.fill("#password", quickstart.password)
            page.click("button:has-text('Sign in')")
            expect(page.locator("h1")).to_have_text("Jobs")

            page.click("nav >> text=New job")
            page.fill("#title", "First job")
            page.fill("#items", "Hello from the quick start.\nA second line of speech.")
            page.click("button:has-text('Create job')")
            expect(page).to_have_url(re.compile(r"/jobs/\d+$"))
            expect(page.locator(".flash-ok")).to_contain_text("Job created")

            page.click("#btn-generate")
            expect(page.locator(".flash-ok")).to_contain_text("Generation started")
            expect(page.locator("#job-status")).to_have_text("COMPLETED", timeout=60_000)
            expect(page.locator("#items audio")).to_have_count(2)
            assert play_first_audio(page) > 0.3

            page.goto("/tokens")
            expect(page.locator("h1")).to_have_text("API tokens")
            assert proxy.requests >= 10
            assert csp.violations == []
        finally:
            browser.close()
