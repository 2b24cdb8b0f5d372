"""The admin pages in a real browser against gunicorn, with real offline speech (espeak).

One flow: sign in, create a job, Generate and watch the progress reach 100 % without a
reload, play an item, crash the worker (SIGKILL) in the middle of a Regenerate, see the
auto-recovered banner, Retry, see it complete. Screenshots go to $SPEECHBATCH_SCREENSHOT_DIR.
"""

from __future__ import annotations

import os
import re
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Dialog, FilePayload, Locator, Page, expect, sync_playwright

from tests.conftest import IN_CI
from tests.support.csp import CspWatch
from tests.support.server import (
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    ApiClient,
    GunicornServer,
    app_env,
    bootstrap,
    sqlite_url,
)

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
# Refresh the README's pictures with SPEECHBATCH_SCREENSHOT_DIR=docs/screenshots; a plain
# run keeps the work tree clean.
SCREENSHOTS = Path(
    os.environ.get("SPEECHBATCH_SCREENSHOT_DIR") or tempfile.mkdtemp(prefix="speechbatch-shots-")
)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Long enough that espeak needs a noticeable moment per item (about half a second), so a
# run is still going when the page loads and when the test pulls the plug.
SENTENCE = (
    "This sentence is spoken by the offline speech engine so that each item takes a little "
    "while to generate. "
)
ITEMS = [f"Item number {n}. " + SENTENCE * 5 for n in ("one", "two", "three", "four", "five")]
HOSTILE = '<img src=x onerror="window.__xss=1"><script>window.__xss=1</script>'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GunicornServer, str]]:
    """gunicorn wsgi:app on SQLite with the default espeak provider; and an API token."""
    tmp = tmp_path_factory.mktemp("browser")
    env = app_env(
        sqlite_url(tmp),
        "http://127.0.0.1:9/v1",  # unused: the provider is espeak
        tmp / "audio",
        TTS_PROVIDER="espeak",
        TTS_TIMEOUT_SECONDS=30,
        LEASE_SECONDS=120,
        ITEM_CONCURRENCY=1,
    )
    token = bootstrap(env)
    app = GunicornServer(env, tmp, workers=1, threads=4, name="browser")
    app.start()
    try:
        yield app, token
    finally:
        app.stop(graceful=False)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium."""
    if not CHROMIUM.exists():
        if IN_CI:
            pytest.fail(f"{CHROMIUM} is required under CI")
        pytest.skip(f"{CHROMIUM} is missing")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser, server: tuple[GunicornServer, str]) -> Iterator[Page]:
    """A fresh browser context (no cookies) on the app, with a desktop viewport; fails the
    test on any Content-Security-Policy violation."""
    context = browser.new_context(
        base_url=server[0].base_url, viewport={"width": 1280, "height": 900}
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


def create_job(page: Page, title: str, lines: list[str]) -> int:
    """Create a job from pasted lines; return its id."""
    page.click("nav >> text=New job")
    page.fill("#title", title)
    page.select_option("#voice", "en-us")
    page.fill("#items", "\n".join(lines))
    page.click("button:has-text('Create job')")
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"))
    return int(page.url.rsplit("/", 1)[1])


def progress(page: Page) -> Locator:
    """The job page's progress bar."""
    return page.locator("#job-progress")


def play_first_audio(page: Page) -> float:
    """Load and play the first item's audio; return its duration in seconds."""
    duration = page.locator("#items audio").first.evaluate(
        """async (audio) => {
            const loaded = new Promise((resolve, reject) => {
                audio.addEventListener("loadedmetadata", resolve, { once: true });
                audio.addEventListener("error", () => reject(new Error(
                    "audio error " + (audio.error && audio.error.code))), { once: true });
            });
            audio.load();
            await loaded;
            audio.muted = true;
            await audio.play();
            audio.pause();
            return audio.duration;
        }"""
    )
    return float(duration)


def test_generate_watch_play_crash_recover_retry(
    page: Page, server: tuple[GunicornServer, str]
) -> None:
    app, token = server
    api = ApiClient(app.base_url, token)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    polls: list[str] = []
    page.on(
        "response",
        lambda r: polls.append(r.url) if re.search(r"/api/jobs/\d+$", r.url) else None,
    )

    sign_in(page)
    job_id = create_job(page, "Welcome messages", ITEMS)
    expect(page.locator(".flash-ok")).to_contain_text("Job created")
    expect(page.locator("#items tbody tr")).to_have_count(5)
    expect(page.locator("#btn-regenerate")).to_be_disabled()

    # Generate, then watch the bar fill in place: the marker survives only without a reload.
    page.click("#btn-generate")
    expect(page.locator(".flash-ok")).to_contain_text("Generation started (run 1)")
    expect(page.locator("#job-status")).to_have_text("GENERATING")
    expect(page.locator("#btn-generate")).to_be_disabled()
    page.evaluate("window.__marker = 'still here'")
    expect(progress(page)).to_have_attribute("aria-valuenow", "100", timeout=30_000)
    expect(page.locator("#job-status")).to_have_text("COMPLETED")
    expect(page.locator("#job-counts")).to_have_text("5 of 5 done")
    assert page.evaluate("window.__marker") == "still here"
    assert polls, "the page never polled the API"
    expect(page.locator("#job-live")).to_be_hidden()
    expect(page.locator("#items audio")).to_have_count(5)
    expect(page.locator("#btn-regenerate")).to_be_enabled()
    expect(page.locator("#btn-generate")).to_be_disabled()
    polls_when_done = len(polls)
    page.wait_for_timeout(2_000)
    assert len(polls) == polls_when_done, "polling did not stop after the job finished"

    assert play_first_audio(page) > 0.5

    # Regenerate (accepting the confirm), and kill the worker once the run has done an item.
    dialogs: list[str] = []

    def accept(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.click("#btn-regenerate")
    expect(page.locator(".flash-ok")).to_contain_text("Regeneration started (run 2)")
    assert dialogs and "billed again" in dialogs[0]
    api.wait_job(
        job_id,
        lambda j: j["status"] == "GENERATING" and j["progress"]["done"] >= 1,
        timeout=20,
        interval=0.02,
        what="the regenerate has finished an item",
    )
    killed = app.kill_workers(signal.SIGKILL)
    app.wait_for_workers(exclude=set(killed))

    page.reload()
    banner = page.locator("#notice")
    expect(banner).to_be_visible(timeout=30_000)
    expect(banner).to_contain_text("recovered automatically")
    expect(banner).to_contain_text("you do not pay again for finished items")
    expect(page.locator("#job-status")).to_have_text("FAILED")
    expect(page.locator("#btn-generate")).to_have_text("Retry")
    expect(page.locator("#btn-generate")).to_be_enabled()
    expect(page.locator("#runs tbody tr").first).to_contain_text("RECOVERED")
    page.screenshot(path=str(SCREENSHOTS / "job.png"), full_page=True)

    before = api.get_job(job_id)
    done_before = {i["id"]: i["updated_at"] for i in before["items"] if i["status"] == "DONE"}
    assert 1 <= len(done_before) < 5

    page.click("#btn-generate")
    expect(page.locator(".flash-ok")).to_contain_text("Generation started (run 3)")
    expect(progress(page)).to_have_attribute("aria-valuenow", "100", timeout=30_000)
    expect(page.locator("#job-status")).to_have_text("COMPLETED")
    expect(banner).to_be_hidden()
    expect(page.locator("#runs tbody tr")).to_have_count(3)
    outcomes = page.locator("#runs tbody tr td:nth-child(5)").all_inner_texts()
    assert outcomes == ["COMPLETED", "RECOVERED", "COMPLETED"]
    after = api.get_job(job_id)
    assert {i["id"]: i["updated_at"] for i in after["items"] if i["id"] in done_before} == (
        done_before
    ), "the retry touched items that were already done"
    page.screenshot(path=str(SCREENSHOTS / "job-completed.png"), full_page=True)

    # A second job from an uploaded file, for the list.
    page.click("nav >> text=New job")
    page.fill("#title", "Station announcements")
    upload: FilePayload = {
        "name": "announcements.txt",
        "mimeType": "text/plain",
        "buffer": b"Mind the gap.\nThe next train is delayed.\nPlease stand back.\n",
    }
    page.set_input_files("#file", files=[upload])
    page.click("button:has-text('Create job')")
    expect(page.locator("#items tbody tr")).to_have_count(3)
    page.click("nav >> text=Jobs")
    rows = page.locator("table.jobs tbody tr")
    expect(rows.first).to_contain_text("Station announcements")
    expect(rows.first).to_contain_text("PENDING")
    expect(page.locator(f"tr[data-job-id='{job_id}']")).to_contain_text("COMPLETED")
    page.screenshot(path=str(SCREENSHOTS / "jobs.png"), full_page=True)
    page.click(".filters >> text=Completed")
    expect(page).to_have_url(re.compile(r"\?status=COMPLETED$"))
    expect(page.locator(f"tr[data-job-id='{job_id}']")).to_be_visible()
    expect(page.locator("table.jobs tbody tr", has_text="Station announcements")).to_have_count(0)

    page.click("button:has-text('Sign out')")
    expect(page).to_have_url(re.compile(r"/login$"))
    page.goto(f"/jobs/{job_id}")
    expect(page).to_have_url(re.compile(r"/login\?next="))


def test_hostile_text_is_shown_as_text(page: Page) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    sign_in(page)
    create_job(page, HOSTILE, [HOSTILE, "plain"])
    expect(page.locator("#job-title")).to_have_text(HOSTILE)
    expect(page.locator("#items .clamp").first).to_have_text(HOSTILE)
    page.goto("/")
    expect(page.locator("table.jobs a", has_text="window.__xss").first).to_be_visible()
    assert page.evaluate("window.__xss") is None
    assert not errors
