"""The admin pages in a real browser against gunicorn.

One flow with real offline speech (espeak): sign in, create a job, Generate and watch the
progress reach 100 % without a reload, play an item, crash the worker (SIGKILL) in the
middle of a Regenerate, see the auto-recovered banner, Retry, see it complete. Then, against
a fake provider whose latency the test sets: a 130-item job shown 100 items a page with a
status filter, polled with If-None-Match (304 while nothing changes) until it completes, and
the job list updating itself. Screenshots of the recovered and the long job go to
$SPEECHBATCH_SCREENSHOT_DIR (tests/e2e/test_pages_anywhere.py takes every other page's).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Dialog, FilePayload, Locator, Page, expect

# CHROMIUM, CHROMIUM_ARGS and require_chromium are re-exported for tests/e2e/test_quickstart.py.
from tests.support.browser import CHROMIUM as CHROMIUM
from tests.support.browser import CHROMIUM_ARGS as CHROMIUM_ARGS
from tests.support.browser import (
    SCREENSHOTS,
    Poll,
    assert_sends_the_last_etag,
    launch,
    new_tab,
    record_polls,
    sign_in,
    wait_until,
)
from tests.support.browser import create_job as create_job_with
from tests.support.browser import require_chromium as require_chromium
from tests.support.fake_provider import FakeProvider
from tests.support.server import ApiClient, GunicornServer, app_env, bootstrap, sqlite_url

pytestmark = pytest.mark.e2e

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
    with launch() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def fake_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[GunicornServer, str, FakeProvider]]:
    """gunicorn wsgi:app on SQLite with the fake provider (latency set by each test)."""
    tmp = tmp_path_factory.mktemp("browser-fake")
    with FakeProvider(latency=0.0, api_key="test-key") as fake:
        # A call may take a few seconds on purpose: the timeout and the lease allow for it.
        # The production default of WORKER_DEAD_SECONDS (heartbeats every 10 s): a summary
        # shows when its worker last beat, so with the tests' 3 s it would change too often
        # for a poll ever to find nothing new.
        env = app_env(
            sqlite_url(tmp), fake.url, tmp / "audio",
            TTS_TIMEOUT_SECONDS=20, LEASE_SECONDS=120, ITEM_CONCURRENCY=4, WORKER_DEAD_SECONDS=60,
        )  # fmt: skip
        token = bootstrap(env)
        app = GunicornServer(env, tmp, workers=1, threads=4, name="browser-fake")
        app.start()
        try:
            yield app, token, fake
        finally:
            fake.latency = 0.0
            app.stop(graceful=False)


@pytest.fixture
def page(browser: Browser, server: tuple[GunicornServer, str]) -> Iterator[Page]:
    """A tab on the espeak server."""
    yield from new_tab(browser, server[0].base_url)


@pytest.fixture
def fake_session(
    browser: Browser, fake_server: tuple[GunicornServer, str, FakeProvider]
) -> Iterator[tuple[Page, ApiClient, FakeProvider]]:
    """A signed-in tab on the fake-provider server, an API client there, and the provider."""
    app, token, fake = fake_server
    for tab in new_tab(browser, app.base_url):
        sign_in(tab)
        yield tab, ApiClient(app.base_url, token), fake


def create_job(page: Page, title: str, lines: list[str]) -> int:
    """Create a job in espeak's American English voice; return its id."""
    return create_job_with(page, title, lines, voice="en-us")


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
    polls = record_polls(page)

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

    # Between runs the page polls slower (every 5 s: tests/e2e/test_job_page_live.py).
    def reads() -> int:
        return len([p for p in polls if not p.path.endswith("/audio")])

    polls_when_done = reads()
    page.wait_for_timeout(2_000)
    assert reads() == polls_when_done, "polling did not slow down after the job finished"

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
    page.screenshot(path=str(SCREENSHOTS / "job-recovered-1280.png"), full_page=True)

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


def test_long_job_pages_filters_and_polls_conditionally(
    fake_session: tuple[Page, ApiClient, FakeProvider],
) -> None:
    page, api, fake = fake_session
    job_id = api.create_job([f"Line {n}." for n in range(1, 131)], title="Long job")["id"]
    rows = page.locator("#items tbody tr")

    # 100 items a page, and a pager.
    page.goto(f"/jobs/{job_id}")
    expect(rows).to_have_count(100)
    expect(page.locator("#items-range")).to_have_text("Page 1 of 2 · 130 items")
    page.click("#items-pager >> text=Next")
    expect(page).to_have_url(re.compile(rf"/jobs/{job_id}\?page=2$"))
    expect(rows).to_have_count(30)
    expect(rows.first.locator("td").first).to_have_text("101")
    expect(rows.last.locator("td").first).to_have_text("130")

    # The status filter, with the count of each status.
    page.click("#item-filters >> text=Done")
    expect(page).to_have_url(re.compile(r"\?status=DONE$"))
    expect(rows).to_have_count(0)
    expect(page.locator("#items-empty")).to_have_text("No done items.")
    page.click("#item-filters >> text=Pending")
    expect(rows).to_have_count(100)
    expect(page.locator("#item-filters [data-count=pending]")).to_have_text("130")

    # A slow provider: between two items nothing changes, and the polls answer 304.
    fake.latency = 4.0
    page.click("#btn-generate")
    expect(page.locator(".flash-ok")).to_contain_text("Generation started (run 1)")

    # A filtered page follows its items: those in flight now, then the next ones, in place.
    page.goto(f"/jobs/{job_id}?status=GENERATING")
    page.evaluate("window.__marker = 'filtered'")
    expect(rows).to_have_count(4)  # ITEM_CONCURRENCY
    expect(rows.first.locator("td").first).to_have_text("1")
    expect(rows.first.locator("td").first).not_to_have_text("1", timeout=15_000)
    expect(rows.locator(".badge-generating")).to_have_count(4)
    assert page.evaluate("window.__marker") == "filtered"

    page.goto(f"/jobs/{job_id}?page=2")
    polls = record_polls(page)
    page.evaluate("window.__marker = 'still here'")

    def answers(path: str) -> list[Poll]:
        return [p for p in polls if p.path == path]

    summary_path, items_path = f"/api/jobs/{job_id}", f"/api/jobs/{job_id}/items"
    wait_until(
        page,
        lambda: all(any(p.status == 304 for p in answers(x)) for x in (summary_path, items_path)),
        timeout=30,
        what="a 304 for the summary and for the items",
    )
    fake.latency = 0.0
    expect(progress(page)).to_have_attribute("aria-valuenow", "100", timeout=60_000)
    expect(page.locator("#job-status")).to_have_text("COMPLETED")
    expect(page.locator("#job-counts")).to_have_text("130 of 130 done")
    expect(rows.locator(".badge-done")).to_have_count(30)
    expect(rows.locator("audio")).to_have_count(30)
    expect(page.locator("#item-filters [data-count=done]")).to_have_text("130")
    assert page.evaluate("window.__marker") == "still here"

    # Only the summary and the items on screen were read, each conditionally after the first
    # (besides the players' audio, whose length they load before anyone presses play).
    polls[:] = [p for p in polls if not p.path.endswith("/audio")]
    assert {p.path for p in polls} == {summary_path, items_path}
    summary, items = answers(summary_path), answers(items_path)
    assert all(p.query == {"items": ["none"]} for p in summary)
    assert all(p.query == {"offset": ["100"], "limit": ["100"]} for p in items)
    for path_polls in (summary, items):
        assert path_polls[0].if_none_match is None and path_polls[0].status == 200
        assert {p.status for p in path_polls} == {200, 304}
        assert_sends_the_last_etag(path_polls)
    finished = len(answers(summary_path))
    page.wait_for_timeout(3_000)
    assert len(answers(summary_path)) == finished, "polling did not slow down after the end"
    expect(page.locator("#job-live")).to_be_hidden()
    page.screenshot(path=str(SCREENSHOTS / "job-long-1280.png"), full_page=True)


def test_job_list_updates_itself_while_a_job_generates(
    fake_session: tuple[Page, ApiClient, FakeProvider],
) -> None:
    page, api, fake = fake_session
    fake.latency = 4.0
    job_id = api.create_job(["One.", "Two.", "Three."], title="Watched from the list")["id"]
    assert api.generate(job_id).status_code == 202
    polls = record_polls(page)
    page.goto("/")
    row = page.locator(f"tr[data-job-id='{job_id}']")
    expect(row).to_contain_text("GENERATING")
    page.evaluate("window.__marker = 'still here'")
    expect(row).to_contain_text("COMPLETED", timeout=30_000)
    expect(row.locator(".job-counts")).to_have_text("3 of 3 done")
    expect(row.locator(".progress")).to_have_attribute("aria-valuenow", "100")
    assert page.evaluate("window.__marker") == "still here"
    lists = [p for p in polls if p.path == "/api/jobs"]
    assert lists and all(p.query == {"page": ["1"], "per_page": ["20"]} for p in lists)
    assert 304 in {p.status for p in lists}
    assert_sends_the_last_etag(lists)
    finished = len(lists)
    page.wait_for_timeout(3_000)
    assert len([p for p in polls if p.path == "/api/jobs"]) == finished, "no slower when idle"

    # Idle, the list still reads itself every 5 s: a job made and run by a script shows up,
    # and runs to its end, without a reload (it used to stop polling for good).
    fake.latency = 0.0
    other = api.create_job(["Four."], title="Made by a script")["id"]
    assert api.generate(other).status_code == 202
    expect(page.locator(f"tr[data-job-id='{other}']")).to_contain_text("COMPLETED", timeout=15_000)
    assert page.evaluate("window.__marker") == "still here"
