"""The job page's renders in a real browser against gunicorn with the espeak voice.

A finished job (real speech) is given two chapters in its database, as an import would
write them; the Render form makes an M4B; the list shows it with a player that plays it
for as long as the API says, chapter titles that seek the player, and download links for
the audio and both caption files. The page fits a phone's width. Screenshots
``job-renders-1280.png`` and ``job-renders-390.png`` go to $SPEECHBATCH_SCREENSHOT_DIR.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect
from sqlalchemy import create_engine, insert
from sqlalchemy.pool import NullPool

from speechbatch.adapters.models import Chapter
from tests.support.browser import PHONE, SCREENSHOTS, launch, new_tab, sign_in
from tests.support.server import (
    SQLITE_FILE,
    ApiClient,
    GunicornServer,
    app_env,
    bootstrap,
    sqlite_url,
)

ITEMS = [
    "Chapter one. The beginning.",
    "Once upon a time there was a batch of text that wanted to be a book.",
    "Chapter two. The end.",
    "And it was rendered, with chapters and captions, at one loudness.",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GunicornServer, str, Path]]:
    """gunicorn wsgi:app on SQLite with espeak; its API token and its database folder."""
    tmp = tmp_path_factory.mktemp("render-page")
    env = app_env(
        sqlite_url(tmp), "http://127.0.0.1:9/v1", tmp / "audio",
        TTS_PROVIDER="espeak", TTS_VOICES="en-us", TTS_TIMEOUT_SECONDS=30, LEASE_SECONDS=120,
    )  # fmt: skip
    token = bootstrap(env)
    app = GunicornServer(env, tmp, workers=1, threads=4, name="render-page")
    app.start()
    try:
        yield app, token, tmp
    finally:
        app.stop(graceful=False)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium."""
    with launch() as chromium:
        yield chromium


def finished_job_with_chapters(api: ApiClient, database_dir: Path) -> int:
    """A COMPLETED espeak job with two chapters (rows as the import writes them)."""
    job = api.create_job(ITEMS, title="A tiny audiobook", voice="en-us")
    assert api.generate(job["id"]).status_code == 202
    api.wait_job(job["id"], lambda j: j["status"] == "COMPLETED", timeout=60)
    engine = create_engine(f"sqlite:///{database_dir / SQLITE_FILE}", poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(
            insert(Chapter),
            [
                {"job_id": job["id"], "index": 0, "title": "The beginning", "first_position": 1},
                {"job_id": job["id"], "index": 1, "title": "The end", "first_position": 3},
            ],
        )
    engine.dispose()
    return int(job["id"])


def reload_until_completed(page: Page, timeout: float = 60) -> Locator:
    """Reload the job page until its newest render is COMPLETED; that render's row."""
    row = page.locator("#renders-list tbody tr").first
    deadline = time.monotonic() + timeout
    while row.get_attribute("data-status") != "COMPLETED":
        assert time.monotonic() < deadline, "the render did not complete"
        page.wait_for_timeout(300)
        page.reload()
    return row


def test_render_from_the_job_page_plays_seeks_and_downloads(
    server: tuple[GunicornServer, str, Path], browser: Browser
) -> None:
    app, token, database_dir = server
    api = ApiClient(app.base_url, token)
    job_id = finished_job_with_chapters(api, database_dir)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    for page in new_tab(browser, app.base_url):
        sign_in(page)
        page.goto(f"/jobs/{job_id}")
        expect(page.locator("#renders-empty")).to_have_text("No renders yet.")
        page.select_option("#render-format", "m4b")
        page.select_option("#render-loudness", "-16")
        page.click("#btn-render")
        expect(page.locator(".flash-ok")).to_contain_text("(M4B) started")
        row = reload_until_completed(page)
        (render,) = api.request("GET", f"/api/jobs/{job_id}/renders").json()["renders"]
        assert [c["title"] for c in render["chapters"]] == ["The beginning", "The end"]
        expect(row.locator("a", has_text="WebVTT")).to_have_attribute(
            "href", render["captions"]["vtt"]
        )
        expect(row.locator("a", has_text="SRT")).to_have_attribute(
            "href", render["captions"]["srt"]
        )
        expect(row.locator("a", has_text="M4B")).to_have_attribute("href", render["download_url"])
        audio = row.locator("audio")
        duration = audio.evaluate(
            """(audio) => new Promise((resolve, reject) => {
                audio.addEventListener("loadedmetadata", () => resolve(audio.duration),
                                       { once: true });
                audio.addEventListener("error", () => reject(new Error("audio error")),
                                       { once: true });
                audio.preload = "metadata";
                audio.load();
            })"""
        )
        assert abs(duration - render["duration_seconds"]) < 0.1
        # A chapter title seeks the player to where the chapter starts.
        row.locator("button[data-seek]", has_text="The end").click()
        position = audio.evaluate("(audio) => audio.currentTime")
        assert abs(position - render["chapters"][1]["start_seconds"]) < 0.5
        audio.evaluate("(audio) => audio.pause()")
        page.screenshot(path=str(SCREENSHOTS / "job-renders-1280.png"), full_page=True)

    for page in new_tab(browser, app.base_url, width=PHONE):
        sign_in(page)
        page.goto(f"/jobs/{job_id}#renders")
        expect(page.locator("#renders-list tbody tr")).to_have_count(1)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.screenshot(path=str(SCREENSHOTS / "job-renders-390.png"), full_page=True)
