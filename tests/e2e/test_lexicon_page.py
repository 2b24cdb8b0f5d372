"""The /lexicon page in a real browser against gunicorn, at 1280 and 390 px, by keyboard
only: write rules, check what they would make stale, save them, preview a sentence, and
nothing wider than the screen. Screenshots go to $SPEECHBATCH_SCREENSHOT_DIR."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Route, expect

from tests.e2e.test_browser import browser as browser  # the module's Chromium fixture
from tests.support.browser import DESKTOP, PHONE, SCREENSHOTS, assert_fits, new_tab, sign_in
from tests.support.server import GunicornServer, page_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GunicornServer]:
    """gunicorn wsgi:app on SQLite (its provider is never called here)."""
    with page_server(tmp_path_factory.mktemp("lexicon-page"), "lexicon-page") as (app, _):
        yield app


def still_counting(route: Route) -> None:
    """The check's page as the server sent it, but saying it is still being counted."""
    sent = route.fetch()
    body = re.sub(r'data-status="\w+"', 'data-status="running"', sent.text())
    body = re.sub(
        r'(id="lexicon-impact"[^>]*>).*?(</div>)', r"\1Counting (as sent)\2", body, flags=re.S
    )
    body = re.sub(r'(id="lexicon-save">)[^<]*', r"\1Save the change", body)
    route.fulfill(response=sent, body=body)


def running_once(route: Route) -> None:
    """A poll of the count answered as if it were still running."""
    sent = route.fetch()
    route.fulfill(response=sent, json={**sent.json(), "status": "running", "complete": False})


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_write_check_save_and_preview_rules_by_keyboard(
    browser: Browser, server: GunicornServer, width: int
) -> None:
    for page in new_tab(browser, server.base_url, width):
        sign_in(page)
        page.click("nav >> text=Lexicon")
        expect(page.locator("h1")).to_have_text("Lexicon")
        page.focus("#lexicon-rules")
        page.keyboard.press("Control+A")
        page.keyboard.type(f"SQL = sequel\nDr\\. = Doctor [regex]\nkg{width} = kilograms")
        page.keyboard.press("Tab")  # the help text is not focusable: the Check button is
        expect(page.locator("button[value='check']")).to_be_focused()
        page.keyboard.press("Enter")
        # The count is made in the background: the check's page is shown again as if it
        # were still counting, its first poll answers so too, and the page's script polls
        # until done, without a reload.
        expect(page).to_have_url(re.compile(r"/lexicon/check/\d+$"))
        page.route("**/lexicon/check/*", still_counting, times=1)
        page.route("**/api/lexicon/impact/*", running_once, times=1)
        page.goto(page.url)
        expect(page.locator("#lexicon-impact")).to_contain_text("Counting what this change")
        expect(page.locator("#lexicon-impact")).to_contain_text("0 lines read")
        expect(page.locator("#lexicon-save")).to_have_text("Save the change")
        page.evaluate("window.notReloaded = true")
        page.screenshot(path=str(SCREENSHOTS / f"lexicon-counting-{width}.png"), full_page=True)
        expect(page.locator("#lexicon-impact")).to_contain_text(
            "This change makes 0 lines in 0 jobs stale"
        )
        expect(page.locator("#lexicon-save")).to_have_text("Save: 0 lines in 0 jobs become stale")
        assert page.evaluate("window.notReloaded") is True
        assert_fits(page)
        page.screenshot(path=str(SCREENSHOTS / f"lexicon-check-{width}.png"), full_page=True)
        page.locator("button[value='save']").focus()
        page.keyboard.press("Enter")
        expect(page.locator(".flash-ok")).to_contain_text("Saved as version")
        expect(page.locator("#lexicon-rules")).to_have_value(
            f"SQL = sequel\nDr\\. = Doctor [regex]\nkg{width} = kilograms"
        )
        page.focus("#lexicon-preview")
        page.keyboard.type("Dr. Smith teaches SQL, not SQLite.")
        page.keyboard.press("Enter")
        expect(page.locator("#lexicon-spoken")).to_contain_text(
            "Doctor Smith teaches sequel, not SQLite."
        )
        page.fill("#lexicon-rules", "(a)\\1 = x [regex]")
        page.click("button[value='check']")
        expect(page.locator("#lexicon-error")).to_contain_text("rule 1")
        expect(page.locator("#lexicon-error")).to_contain_text("backreference")
        assert "Rule(" not in page.content()
        assert_fits(page)
        page.screenshot(path=str(SCREENSHOTS / f"lexicon-{width}.png"), full_page=True)
