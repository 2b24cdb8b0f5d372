"""The /webhooks page in a real browser against gunicorn, at 1280 and 390 px: add a webhook
(its secret shown once), send a ping and see it DELIVERED to a local receiver (its
signature verified with ``standardwebhooks``), disable it, and nothing wider than the
screen. Screenshots go to $SPEECHBATCH_SCREENSHOT_DIR."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.test_browser import browser as browser  # the module's Chromium fixture
from tests.support.browser import DESKTOP, PHONE, SCREENSHOTS, assert_fits, new_tab, sign_in
from tests.support.server import GunicornServer, page_server
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GunicornServer]:
    """gunicorn wsgi:app on SQLite (its provider is never called here)."""
    with page_server(tmp_path_factory.mktemp("webhooks-page"), "webhooks-page") as (app, _):
        yield app


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_add_ping_and_disable_a_webhook(
    browser: Browser, server: GunicornServer, width: int
) -> None:
    receiver = Receiver()
    try:
        for page in new_tab(browser, server.base_url, width):
            sign_in(page)
            page.click("nav >> text=Webhooks")
            expect(page.locator("h1")).to_have_text("Webhooks")
            page.fill("#webhook-url", receiver.url + f"/{width}")
            page.fill("#webhook-description", "CMS publish hook")
            page.check("input[value='export.completed']")
            page.click("button:has-text('Add webhook')")
            secret = page.locator("#new-webhook .token-secret").inner_text()
            assert secret.startswith("whsec_")
            receiver.secret = secret
            assert_fits(page)
            page.screenshot(path=str(SCREENSHOTS / f"webhooks-{width}.png"), full_page=True)
            page.goto("/webhooks")
            expect(page.locator("#new-webhook")).to_have_count(0)  # shown once
            page.click(f"a:has-text('/{width}')")
            expect(page).to_have_url(re.compile(r"/webhooks/\d+$"))
            page.click("#btn-ping")
            for _ in range(50):
                if page.locator(".deliveries .badge-delivered").count():
                    break
                page.wait_for_timeout(200)
                page.reload()
            expect(page.locator(".deliveries .badge-delivered")).to_have_count(1)
            assert receiver.count() == 1 and receiver.received[0].verified
            assert_fits(page)
            page.screenshot(path=str(SCREENSHOTS / f"webhook-{width}.png"), full_page=True)
            page.click("button:has-text('Disable')")
            expect(page.locator(".meta .badge")).to_have_text("DISABLED")
    finally:
        receiver.stop()


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_a_new_token_shows_the_same_shown_once_block(
    browser: Browser, server: GunicornServer, width: int
) -> None:
    for page in new_tab(browser, server.base_url, width):
        sign_in(page)
        page.goto("/tokens")
        page.fill("#token-name", f"nightly import script {width}")
        page.click("button:has-text('Create token')")
        block = page.locator("#new-token")
        expect(block).to_have_attribute("role", "status")
        expect(block).to_contain_text("Copy it now: it is shown this once.")
        assert page.locator("#new-token .token-secret").inner_text().startswith("sb_")
        assert_fits(page)
        page.screenshot(path=str(SCREENSHOTS / f"tokens-new-{width}.png"), full_page=True)
        page.goto("/tokens")
        expect(page.locator("#new-token")).to_have_count(0)  # shown once
