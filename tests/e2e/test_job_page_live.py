"""The job page's live state in a real browser against gunicorn (offline espeak voice):
a page left open on a pending job picks up a run started through the API and follows it
to COMPLETED without a reload; between runs it keeps reading the summary, slower; a voice
changed elsewhere makes the Render warning and the stale link appear, and Render asks
before it joins old audio; the players know their length before anyone presses play.
Screenshots of the warned job page at 1280 and 390 px go to $SPEECHBATCH_SCREENSHOT_DIR."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Dialog, Page, expect

# The espeak server (real audio, so players have a length) and Chromium of the browser tests.
from tests.e2e.test_browser import browser as browser
from tests.e2e.test_browser import server as server
from tests.support.browser import (
    DESKTOP,
    PHONE,
    SCREENSHOTS,
    Poll,
    assert_fits,
    new_tab,
    record_polls,
    sign_in,
    wait_until,
)
from tests.support.server import ApiClient, GunicornServer

pytestmark = pytest.mark.e2e

# Long enough that espeak takes most of a second per line: the run (one line at a time)
# outlasts an idle interval, so the page sees it GENERATING.
SENTENCE = "This line is spoken by the offline voice, and it takes a moment to generate. "
LINES = [f"Line number {n}. " + SENTENCE * 6 for n in range(1, 13)]
# The job page's data-idle-poll-ms (web/pages.py IDLE_POLL_INTERVAL_MS) and data-poll-ms.
IDLE_SECONDS, LIVE_SECONDS = 5.0, 1.5


def summaries(polls: list[Poll], job_id: int) -> list[Poll]:
    """The page's reads of the job's summary."""
    return [p for p in polls if p.path == f"/api/jobs/{job_id}"]


def gaps(polls: list[Poll]) -> list[float]:
    """Seconds between consecutive polls."""
    return [later.at - earlier.at for earlier, later in itertools.pairwise(polls)]


@pytest.fixture
def page(browser: Browser, server: tuple[GunicornServer, str]) -> Iterator[Page]:
    """A signed-in tab at a desktop's width."""
    for tab in new_tab(browser, server[0].base_url):
        sign_in(tab)
        yield tab


def follow_a_run_started_elsewhere(page: Page, api: ApiClient, job_id: int) -> None:
    """Open the pending job, start it through the API, watch it end without a reload."""
    polls = record_polls(page)
    page.goto(f"/jobs/{job_id}")
    expect(page.locator("#job-counts")).to_have_text("0 of 12 done · 12 pending")
    expect(page.locator("#btn-render")).to_be_disabled()
    page.evaluate("window.__marker = 'still here'")
    # Idle: the summary alone, every IDLE_SECONDS (the items only when it changed).
    wait_until(page, lambda: len(summaries(polls, job_id)) >= 3, 20, "three idle polls")
    idle = summaries(polls, job_id)
    assert min(gaps(idle)) > IDLE_SECONDS - 0.5, gaps(idle)
    assert [p.status for p in idle[1:]] == [304] * (len(idle) - 1)
    assert len([p for p in polls if p.path.endswith("/items")]) <= 1

    assert api.generate(job_id).status_code == 202
    started = time.monotonic()
    expect(page.locator("#job-status")).to_have_text("GENERATING", timeout=10_000)
    expect(page.locator("#job-live")).to_be_visible()
    expect(page.locator("#btn-generate")).to_be_disabled()
    expect(page.locator("#btn-cancel")).to_be_enabled()
    expect(page.locator("#job-status")).to_have_text("COMPLETED", timeout=60_000)
    expect(page.locator("#job-counts")).to_have_text("12 of 12 done")
    expect(page.locator("#items audio")).to_have_count(12)
    expect(page.locator("#job-live")).to_be_hidden()
    expect(page.locator("#btn-render")).to_be_enabled()
    expect(page.locator("#btn-regenerate")).to_be_enabled()
    expect(page.locator("#runs tbody tr")).to_have_count(1)
    assert page.evaluate("window.__marker") == "still here"
    live = [p for p in summaries(polls, job_id) if p.at > started]
    assert min(gaps(live)) < IDLE_SECONDS - 1, "the run was not followed at the live pace"


def render_warns_of_lines_made_stale_elsewhere(page: Page, api: ApiClient, job_id: int) -> None:
    """Change the voice through the API: the open page shows the warning, Render asks."""
    changed = api.request("PATCH", f"/api/jobs/{job_id}", {"voice": "en"})
    assert changed.status_code == 200, changed.text
    warning = page.locator("#render-stale")
    expect(warning).to_be_visible(timeout=(IDLE_SECONDS + 5) * 1000)
    expect(warning).to_contain_text("12 lines are stale")
    expect(page.locator("#btn-regenerate-stale")).to_have_text("Regenerate 12 stale lines…")
    expect(page.locator("#item-filters [data-count=stale]")).to_have_text("12")
    dialogs: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.click("#btn-render")
    wait_until(page, lambda: bool(dialogs), 5, "the Render confirm")
    assert "12 lines are stale" in dialogs[0] and "old audio" in dialogs[0]
    expect(page.locator("#renders-empty")).to_be_visible()
    assert api.request("GET", f"/api/jobs/{job_id}/renders").json()["renders"] == []


def test_an_open_page_follows_a_run_started_elsewhere(
    page: Page, browser: Browser, server: tuple[GunicornServer, str]
) -> None:
    app, token = server
    api = ApiClient(app.base_url, token)
    job_id = api.create_job(LINES, title="Started elsewhere", voice="en-us")["id"]
    follow_a_run_started_elsewhere(page, api, job_id)

    # The players know their length before anyone presses play.
    page.wait_for_function(
        """() => [...document.querySelectorAll('#items audio')].every(
            (a) => a.readyState >= 1 && a.duration > 0 && a.paused)""",
        timeout=20_000,
    )
    render_warns_of_lines_made_stale_elsewhere(page, api, job_id)
    page.reload()
    expect(page.locator("#render-stale")).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / f"job-stale-{DESKTOP}.png"), full_page=True)
    for phone in new_tab(browser, app.base_url, PHONE):
        sign_in(phone)
        phone.goto(f"/jobs/{job_id}")
        expect(phone.locator("#render-stale")).to_be_visible()
        assert_fits(phone)
        phone.screenshot(path=str(SCREENSHOTS / f"job-stale-{PHONE}.png"), full_page=True)


def test_usage_says_the_offline_voice_spoke(
    page: Page, browser: Browser, server: tuple[GunicornServer, str]
) -> None:
    app, token = server
    api = ApiClient(app.base_url, token)
    job_id = api.create_job(["Spoken, not billed."], title="Offline", voice="en-us")["id"]
    assert api.generate(job_id).status_code == 202
    api.wait_job(job_id, lambda j: j["status"] == "COMPLETED", timeout=30)
    page.goto("/usage")
    expect(page.locator("#usage")).to_contain_text("characters spoken")
    expect(page.locator("#usage")).to_contain_text("nobody bills them")
    expect(page.locator("#usage")).not_to_contain_text("characters billed")
    page.screenshot(path=str(SCREENSHOTS / f"usage-offline-{DESKTOP}.png"), full_page=True)
    for phone in new_tab(browser, app.base_url, PHONE):
        sign_in(phone)
        phone.goto("/usage")
        expect(phone.locator("#usage")).to_contain_text("characters spoken")
        assert_fits(phone)
        phone.screenshot(path=str(SCREENSHOTS / f"usage-offline-{PHONE}.png"), full_page=True)
