"""The job page's renders in a real browser against gunicorn with the espeak voice.

A Markdown document of three chapters is imported through the API and generated (real
speech); the job page shows its chapters as sections of the items list with their item
counts; the Render form makes an M4B; the list shows it with a player that plays it for
as long as the API says, chapter titles that seek the player, and download links for the
audio and both caption files. The page fits a phone's width. Screenshots
``job-renders-1280.png`` and ``job-renders-390.png`` go to $SPEECHBATCH_SCREENSHOT_DIR.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Browser, Locator, Page, expect

from tests.support.browser import PHONE, SCREENSHOTS, assert_fits, launch, new_tab, sign_in
from tests.support.server import ApiClient, GunicornServer, page_server

# Three chapters: a heading of level 1 or 2 starts one, and is its first item.
DOCUMENT = """# The beginning

Once upon a time there was a batch of text that wanted to be a book.

## The middle

It was read aloud. Then it was joined. It went on for a while.

## The end

And it was rendered, with chapters and captions, at one loudness.
"""
TITLES = ["The beginning", "The middle", "The end"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GunicornServer, str, Path]]:
    """gunicorn wsgi:app on SQLite with espeak; its API token and its database folder."""
    tmp = tmp_path_factory.mktemp("render-page")
    espeak: dict[str, str | int] = {
        "TTS_PROVIDER": "espeak", "TTS_VOICES": "en-us", "TTS_TIMEOUT_SECONDS": 30,
    }  # fmt: skip
    with page_server(tmp, "render-page", **espeak, LEASE_SECONDS=120) as (app, token):
        yield app, token, tmp


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium."""
    with launch() as chromium:
        yield chromium


def imported_finished_job(api: ApiClient) -> int:
    """A COMPLETED espeak job imported from DOCUMENT (max 200 characters an item)."""
    answer = requests.post(
        f"{api.base_url}/api/jobs/import",
        headers={"Authorization": f"Bearer {api.token}"},
        data={"voice": "en-us", "title": "A tiny audiobook", "max_characters": "200"},
        files={"file": ("tiny.md", DOCUMENT.encode(), "text/markdown")},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    job = answer.json()
    assert [c["title"] for c in job["chapters"]] == TITLES
    assert api.generate(job["id"]).status_code == 202
    api.wait_job(job["id"], lambda j: j["status"] == "COMPLETED", timeout=60)
    return int(job["id"])


def assert_chapter_sections(page: Page, chapters: list[dict[str, object]]) -> None:
    """The chapters list and the items list's sections: each title with its item count."""
    counts = [f"{c['items']} item{'s' if c['items'] != 1 else ''}" for c in chapters]
    listed = page.locator("#chapters li")
    expect(listed).to_have_count(len(chapters))
    sections = page.locator("#items tr.chapter-row")
    expect(sections).to_have_count(len(chapters))
    for n, chapter in enumerate(chapters):
        expect(listed.nth(n)).to_contain_text(f"{chapter['title']} {counts[n]}")
        expect(sections.nth(n).locator(".chapter-title")).to_have_text(str(chapter["title"]))
        expect(sections.nth(n).locator(".chapter-count")).to_have_text(counts[n])
        # The section's next row is the chapter's first item, the heading.
        first = page.locator(f"#chapter-{chapter['index']} + tr .cell-id")
        expect(first).to_have_text(str(chapter["first_position"]))
        expect(page.locator(f"#chapter-{chapter['index']} + tr .clamp")).to_have_text(
            str(chapter["title"])
        )


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
    app, token, _ = server
    api = ApiClient(app.base_url, token)
    job_id = imported_finished_job(api)
    job = api.request("GET", f"/api/jobs/{job_id}").json()
    chapters = job["chapters"]
    assert sum(c["items"] for c in chapters) == job["progress"]["total"]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    for page in new_tab(browser, app.base_url):
        sign_in(page)
        page.goto(f"/jobs/{job_id}")
        assert_chapter_sections(page, chapters)
        # The live updates reconcile the item rows (as while a run goes on): the sections
        # stay where they are, before their chapters' first items.
        page.evaluate(
            """async () => {
                const { reconcile } = await import("/static/common.js");
                const body = document.querySelector("#items tbody");
                const ids = [...body.querySelectorAll("tr[data-item-id]")]
                    .map((row) => ({ id: row.dataset.itemId }));
                reconcile(body, "itemId", ids, () => { throw new Error("no new row"); },
                          () => {});
            }"""
        )
        assert_chapter_sections(page, chapters)
        expect(page.locator("#renders-empty")).to_have_text("No renders yet.")
        page.select_option("#render-format", "m4b")
        page.select_option("#render-loudness", "-16")
        page.click("#btn-render")
        expect(page.locator(".flash-ok")).to_contain_text("(M4B) started")
        row = reload_until_completed(page)
        (render,) = api.request("GET", f"/api/jobs/{job_id}/renders").json()["renders"]
        assert [c["title"] for c in render["chapters"]] == TITLES
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
        # Each chapter title seeks the player to where the chapter starts.
        seeks = row.locator("button[data-seek]")
        expect(seeks).to_have_text(TITLES)
        for n in (2, 1, 0):
            seeks.nth(n).click()
            position = audio.evaluate("(audio) => audio.currentTime")
            assert abs(position - render["chapters"][n]["start_seconds"]) < 0.5
            audio.evaluate("(audio) => audio.pause()")
        page.screenshot(path=str(SCREENSHOTS / "job-renders-1280.png"), full_page=True)

    for page in new_tab(browser, app.base_url, width=PHONE):
        sign_in(page)
        page.goto(f"/jobs/{job_id}")
        assert_chapter_sections(page, chapters)
        page.screenshot(path=str(SCREENSHOTS / "job-chapters-390.png"), full_page=True)
        page.goto(f"/jobs/{job_id}#renders")
        expect(page.locator("#renders-list tbody tr")).to_have_count(1)
        assert_fits(page)
        page.screenshot(path=str(SCREENSHOTS / "job-renders-390.png"), full_page=True)


def test_an_acx_render_shows_its_check_and_chapter_files(
    server: tuple[GunicornServer, str, Path], browser: Browser
) -> None:
    app, token, _ = server
    api = ApiClient(app.base_url, token)
    job_id = imported_finished_job(api)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for page in new_tab(browser, app.base_url):
        sign_in(page)
        page.goto(f"/jobs/{job_id}")
        page.select_option("#render-preset", "acx")
        page.click("#btn-render")
        expect(page.locator(".flash-ok")).to_contain_text("(MP3) started")
        row = reload_until_completed(page)
        (render,) = api.request("GET", f"/api/jobs/{job_id}/renders").json()["renders"]
        check = render["check"]
        assert (render["preset"], check["preset"]) == ("acx", "acx")
        expect(row.locator("a", has_text="Chapters (ZIP)")).to_have_attribute(
            "href", render["chapter_files_url"]
        )
        verdict = row.locator(".check-verdict")
        if check["passed"]:
            expect(verdict).to_have_text("✓ Passes ACX")
        else:
            expect(row.locator(".check-failures li")).to_have_text(check["failures"])
        row.locator(".check-figures summary").click()
        expect(row.locator(".check-chapters .check-chapter")).to_have_text(TITLES)
        page.screenshot(path=str(SCREENSHOTS / "job-render-check-1280.png"), full_page=True)
        assert check["passed"], check["failures"]  # espeak's speech passes ACX's rules
    for page in new_tab(browser, app.base_url, width=PHONE):
        sign_in(page)
        page.goto(f"/jobs/{job_id}#renders")
        page.locator("#renders-list tbody tr").first.locator(".check-figures summary").click()
        assert_fits(page)
        page.screenshot(path=str(SCREENSHOTS / "job-render-check-390.png"), full_page=True)
