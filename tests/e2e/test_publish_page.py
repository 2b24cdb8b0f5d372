"""The job page's publishing in a real browser against gunicorn with the espeak voice:
the Feed button shows a secret URL once, a podcast app (``requests``, no credentials)
reads the feed and its episode's audio, and Turn off makes the URL answer 404; the
Render form makes a read-along EPUB, listed as a book (no player). The page fits a
phone's width. Screenshots ``job-feed-1280.png``, ``job-feed-390.png`` and
``job-epub-1280.png`` go to $SPEECHBATCH_SCREENSHOT_DIR."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
import zipfile

import requests
from playwright.sync_api import Browser, expect

from tests.e2e.test_render_page import (
    browser,
    imported_finished_job,
    reload_until_completed,
    server,
)
from tests.support.browser import PHONE, SCREENSHOTS, assert_fits, new_tab, sign_in
from tests.support.server import ApiClient, GunicornServer, wait_until

__all__ = ["browser", "server"]
FEED_URL = re.compile(r"https?://[^\s]+/feeds/[A-Za-z0-9_-]+\.xml")


def rendered(api: ApiClient, job_id: int) -> None:
    """An MP3 render of the job, polled to COMPLETED."""
    made = api.request("POST", f"/api/jobs/{job_id}/renders", json={"format": "mp3"})
    assert made.status_code == 202, made.text
    path = f"/api/jobs/{job_id}/renders/{made.json()['id']}"
    wait_until(
        lambda: api.request("GET", path).json()["status"] == "COMPLETED",
        timeout=60,
        what="the render completed",
    )


def test_feed_button_shows_a_url_a_podcast_app_reads_until_turned_off(
    server: tuple[GunicornServer, str, object], browser: Browser
) -> None:
    app, token, _ = server
    api = ApiClient(app.base_url, token)
    job_id = imported_finished_job(api)
    rendered(api, job_id)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for page in new_tab(browser, app.base_url):
        sign_in(page)
        page.goto(f"/jobs/{job_id}")
        expect(page.locator("#btn-feed")).to_have_text("Make a feed URL")
        page.click("#btn-feed")
        flash = page.locator(".flash-ok", has_text="Podcast feed")
        expect(flash).to_be_visible()
        match = FEED_URL.search(flash.inner_text())
        assert match, flash.inner_text()
        url = match.group(0)
        expect(page.locator("#feed-state")).to_contain_text("On since")
        page.screenshot(path=str(SCREENSHOTS / "job-feed-1280.png"), full_page=True)

        feed = requests.get(url, timeout=30)
        assert feed.status_code == 200 and feed.headers["Content-Type"].startswith(
            "application/rss+xml"
        )
        enclosure = ET.fromstring(feed.content).find("channel/item/enclosure")
        assert enclosure is not None
        audio = requests.get(enclosure.get("url", ""), timeout=30)
        assert audio.status_code == 200 and audio.headers["Content-Type"] == "audio/mpeg"
        assert len(audio.content) == int(enclosure.get("length", ""))

        page.click("#btn-feed-revoke")
        expect(page.locator(".flash-ok")).to_contain_text("Podcast feed revoked")
        assert requests.get(url, timeout=30).status_code == 404

    for page in new_tab(browser, app.base_url, width=PHONE):
        sign_in(page)
        page.goto(f"/jobs/{job_id}")
        page.click("#btn-feed")
        expect(page.locator(".flash-ok", has_text="Podcast feed")).to_be_visible()
        assert_fits(page)
        page.screenshot(path=str(SCREENSHOTS / "job-feed-390.png"), full_page=True)


def test_an_epub_render_from_the_job_page_is_a_book(
    server: tuple[GunicornServer, str, object], browser: Browser
) -> None:
    app, token, _ = server
    api = ApiClient(app.base_url, token)
    job_id = imported_finished_job(api)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for page in new_tab(browser, app.base_url):
        sign_in(page)
        page.goto(f"/jobs/{job_id}")
        page.select_option("#render-format", "epub")
        page.click("#btn-render")
        expect(page.locator(".flash-ok")).to_contain_text("(EPUB) started")
        row = reload_until_completed(page)
        expect(row.locator("audio")).to_have_count(0)
        expect(row.locator(".render-player")).to_contain_text("Media Overlays")
        link = row.locator("a", has_text="EPUB")
        href = link.get_attribute("href") or ""
        book = requests.get(
            app.base_url + href, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        assert book.headers["Content-Type"] == "application/epub+zip"
        with zipfile.ZipFile(io.BytesIO(book.content)) as epub:
            assert epub.read("mimetype") == b"application/epub+zip"
            assert "EPUB/chapter-003.smil" in epub.namelist()  # three chapters
        page.screenshot(path=str(SCREENSHOTS / "job-epub-1280.png"), full_page=True)
