"""The New job page in a real browser against gunicorn, at 1280 and 390 px: an EPUB chosen,
its chapters listed with front and back matter unticked, one more unticked, and the job
made of the chapters left ticked. Screenshots go to $SPEECHBATCH_SCREENSHOT_DIR."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, FilePayload, expect

from tests.e2e.test_browser import browser as browser  # the module's Chromium fixture
from tests.support.browser import DESKTOP, PHONE, SCREENSHOTS, assert_fits, new_tab, sign_in
from tests.support.epubs import BOOK_AUTHOR, BOOK_CHAPTERS, BOOK_TITLE, build_book_epub
from tests.support.server import GunicornServer, page_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GunicornServer]:
    """gunicorn wsgi:app on SQLite (its provider is never called here)."""
    with page_server(tmp_path_factory.mktemp("import-page"), "import-page") as (app, _):
        yield app


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_the_chapters_are_ticked_before_the_import(
    browser: Browser, server: GunicornServer, width: int
) -> None:
    for page in new_tab(browser, server.base_url, width):
        sign_in(page)
        page.goto("/jobs/new")
        expect(page.locator("#chapters")).to_be_hidden()
        book = FilePayload(
            name="jekyll.epub", mimeType="application/epub+zip", buffer=build_book_epub()
        )
        page.set_input_files("#file", files=[book])
        boxes = page.locator("#chapters-list input[type=checkbox]")
        expect(boxes).to_have_count(len(BOOK_CHAPTERS))
        for n, (title, kept) in enumerate(BOOK_CHAPTERS):
            expect(page.locator("#chapters-list label").nth(n)).to_contain_text(title)
            if kept:
                expect(boxes.nth(n)).to_be_checked()
            else:
                expect(boxes.nth(n)).not_to_be_checked()
        expect(page.locator("#chapters-status")).to_have_text("2 of 7 chapters ticked to import.")
        expect(page.locator("#title")).to_have_attribute("placeholder", BOOK_TITLE)
        assert_fits(page)
        page.screenshot(path=str(SCREENSHOTS / f"import-chapters-{width}.png"), full_page=True)
        boxes.nth(4).uncheck()  # "Search for Mr. Hyde"
        boxes.nth(1).check()  # the title page, after all
        expect(page.locator("#chapters-status")).to_have_text("2 of 7 chapters ticked to import.")
        boxes.nth(3).uncheck()
        expect(page.locator("#chapters-status")).to_have_text("1 of 7 chapters ticked to import.")
        boxes.nth(3).check()
        page.click("button[type=submit] >> text=Create job")
        expect(page.locator("h1")).to_contain_text(BOOK_TITLE)
        job_id = int(page.url.rstrip("/").rsplit("/", 1)[-1])
        job = page.request.get(f"/api/jobs/{job_id}?items=none").json()
        assert [c["title"] for c in job["chapters"]] == ["Opening", "Story of the Door"]
        assert job["author"] == BOOK_AUTHOR
        assert_fits(page)
        page.screenshot(path=str(SCREENSHOTS / f"import-job-{width}.png"), full_page=True)


def test_a_file_that_is_no_document_says_so_where_the_chapters_would_be(
    browser: Browser, server: GunicornServer
) -> None:
    for page in new_tab(browser, server.base_url, DESKTOP):
        sign_in(page)
        page.goto("/jobs/new")
        broken = FilePayload(name="broken.epub", mimeType="application/epub+zip", buffer=b"PK")
        page.set_input_files("#file", files=[broken])
        expect(page.locator("#chapters-status")).to_contain_text("not a readable EPUB")
        expect(page.locator("#chapters-list input")).to_have_count(0)
        # A file of lines lists no chapters.
        lines = FilePayload(name="lines.csv", mimeType="text/csv", buffer=b"text\nHello.\n")
        page.set_input_files("#file", files=[lines])
        expect(page.locator("#chapters")).to_be_hidden()
