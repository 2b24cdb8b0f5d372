"""Debian's headless Chromium through Playwright, for the browser tests in tests/e2e.

``launch()`` starts the browser (skipped without /usr/bin/chromium, failed under CI);
``new_tab`` opens a fresh context (no cookies) at a given width that fails the test on any
Content-Security-Policy violation; ``sign_in`` and ``create_job`` use the forms as a person
would; ``record_polls`` watches the API answers a page receives.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Browser, Page, Response, expect, sync_playwright

from tests.conftest import IN_CI
from tests.support.csp import CspWatch
from tests.support.server import ADMIN_EMAIL, ADMIN_PASSWORD

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Refresh the README's pictures with SPEECHBATCH_SCREENSHOT_DIR=docs/screenshots; a plain
# run keeps the work tree clean.
SCREENSHOTS = Path(
    os.environ.get("SPEECHBATCH_SCREENSHOT_DIR") or tempfile.mkdtemp(prefix="speechbatch-shots-")
)
DESKTOP = 1280
PHONE = 390


def require_chromium() -> None:
    """Skip without Debian's Chromium, but fail under CI: the browser tests are mandatory."""
    if not CHROMIUM.exists():
        if IN_CI:
            pytest.fail(f"{CHROMIUM} is required under CI")
        pytest.skip(f"{CHROMIUM} is missing")


@contextmanager
def launch() -> Iterator[Browser]:
    """Debian's headless Chromium, closed on exit."""
    require_chromium()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


def new_tab(browser: Browser, base_url: str, width: int = DESKTOP) -> Iterator[Page]:
    """A fresh browser context (no cookies) on ``base_url``, ``width`` pixels wide (a phone's
    is touch-enabled); fails the test on any Content-Security-Policy violation.

    Not Playwright's ``is_mobile``: a mobile viewport zooms out to fit a page that is too
    wide, which would hide the very sideways scrolling the tests look for.
    """
    phone = width < 600
    context = browser.new_context(
        base_url=base_url,
        viewport={"width": width, "height": 844 if phone else 900},
        has_touch=phone,
    )
    context.set_default_timeout(20_000)
    csp = CspWatch(context)
    tab = context.new_page()
    try:
        yield tab
    finally:
        context.close()
    # The pages must work under their Content-Security-Policy: no inline script or style.
    assert csp.violations == []


def sign_in(page: Page) -> None:
    """Sign in through the form."""
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login\?next=(/|%2F)$"))
    page.fill("#email", ADMIN_EMAIL)
    page.fill("#password", ADMIN_PASSWORD)
    page.click("button:has-text('Sign in')")
    expect(page).to_have_url(re.compile(r"/$"))
    expect(page.locator("h1")).to_have_text("Jobs")


def create_job(page: Page, title: str, lines: list[str], voice: str | None = None) -> int:
    """Create a job from pasted lines through the New job form; return its id."""
    page.goto("/jobs/new")
    page.fill("#title", title)
    if voice is not None:
        page.select_option("#voice", voice)
    page.fill("#items", "\n".join(lines))
    page.click("button:has-text('Create job')")
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"))
    return int(page.url.rsplit("/", 1)[1])


@dataclass
class Poll:
    """One API answer the page received: path, query, status, If-None-Match sent, ETag,
    and when (``time.monotonic()``)."""

    path: str
    query: dict[str, list[str]]
    status: int
    if_none_match: str | None
    etag: str | None
    at: float = field(default_factory=time.monotonic)


def record_polls(page: Page) -> list[Poll]:
    """Every /api/ answer the page receives from now on, in order."""
    polls: list[Poll] = []

    def seen(response: Response) -> None:
        url = urlsplit(response.url)
        if url.path.startswith("/api/"):
            header = response.request.headers.get("if-none-match")
            etag = response.headers.get("etag")
            polls.append(Poll(url.path, parse_qs(url.query), response.status, header, etag))

    page.on("response", seen)
    return polls


def assert_sends_the_last_etag(answers: list[Poll]) -> None:
    """Every poll after the first sends the ETag of the last 200 as If-None-Match."""
    last = None
    for poll in answers:
        assert poll.if_none_match == last, (poll, last)
        if poll.status == 200:
            assert poll.etag, poll
            last = poll.etag
        else:
            assert poll.status == 304, poll


def wait_until(page: Page, condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Let the page run until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        page.wait_for_timeout(200)


def fits(page: Page) -> bool:
    """Whether the page is no wider than the window (no sideways scrolling)."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def assert_fits(page: Page) -> None:
    """Fail when the page scrolls sideways."""
    assert fits(page), f"{page.url} scrolls sideways"
