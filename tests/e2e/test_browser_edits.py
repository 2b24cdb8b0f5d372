"""Fixing one line in a real browser against gunicorn (fake provider): edit a line,
regenerate only it after reading its estimate, listen to and restore the old take
(no call), filter the stale lines, change the job's voice and options by keyboard, delete
the job. Screenshots of the item page, the estimate, the job page and its voice and
options form at 1280 and 390 px go to $SPEECHBATCH_SCREENSHOT_DIR."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Dialog, Page, expect

from tests.support.browser import PHONE, SCREENSHOTS, launch, new_tab, sign_in
from tests.support.fake_provider import FakeProvider
from tests.support.server import ApiClient, GunicornServer, app_env, bootstrap, sqlite_url

pytestmark = pytest.mark.e2e

LINES = ["Welcome aboard.", "The next station is Central.", "Mind the gap."]


@pytest.fixture(scope="module")
def fake_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[GunicornServer, str, FakeProvider]]:
    """gunicorn wsgi:app on SQLite with the fake provider; an API token."""
    tmp = tmp_path_factory.mktemp("browser-edits")
    with FakeProvider(latency=0.0, api_key="test-key") as fake:
        env = app_env(
            sqlite_url(tmp), fake.url, tmp / "audio", LEASE_SECONDS=120, TTS_VOICES="alloy,echo"
        )
        token = bootstrap(env)
        app = GunicornServer(env, tmp, workers=1, threads=4, name="browser-edits")
        app.start()
        try:
            yield app, token, fake
        finally:
            app.stop(graceful=False)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launch() as chromium:
        yield chromium


def no_sideways_scroll(page: Page) -> None:
    """The page fits its viewport's width (a phone's: no sideways scrolling)."""
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE, width


def shoot(page: Page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


def test_edit_a_line_regenerate_it_and_restore_the_old_take(
    browser: Browser, fake_server: tuple[GunicornServer, str, FakeProvider]
) -> None:
    app, token, fake = fake_server
    api = ApiClient(app.base_url, token)
    job = api.create_job(LINES, title="Station announcements")
    job_id = job["id"]
    assert api.generate(job_id).status_code == 202
    api.wait_for(lambda: api.get_job(job_id)["status"] == "COMPLETED", timeout=20)
    item_id = api.get_job(job_id)["items"][1]["id"]

    for page in new_tab(browser, app.base_url):
        sign_in(page)
        page.goto(f"/jobs/{job_id}")
        page.click(f"#items tr[data-item-id='{item_id}'] .item-fix")
        expect(page).to_have_url(re.compile(rf"/jobs/{job_id}/items/{item_id}$"))
        # By keyboard: the edit box is labelled and the Save button takes Enter.
        page.get_by_label("New text for line 2").fill("The next station is Central Square.")
        page.focus("#btn-save")
        page.keyboard.press("Enter")
        expect(page.locator(".flash-ok")).to_contain_text("Saved")
        expect(page.locator(".badge-stale")).to_be_visible()

        page.goto(f"/jobs/{job_id}?flag=stale")
        expect(page.locator("#items tbody tr")).to_have_count(1)
        expect(page.locator("#item-filters [data-count=stale]")).to_have_text("1")
        shoot(page, "job-edited-1280.png")

        page.goto(f"/jobs/{job_id}/items/{item_id}")
        page.click("#btn-regenerate-line")
        expect(page.locator("#selection-estimate")).to_contain_text(
            "Regenerate: 1 item, 35 characters"
        )
        shoot(page, "regenerate-selection-1280.png")
        page.click("#btn-confirm-regenerate")
        expect(page).to_have_url(re.compile(rf"/jobs/{job_id}$"))
        expect(page.locator("#job-status")).to_have_text("COMPLETED", timeout=20_000)
        assert fake.calls("The next station is Central Square.") == 1
        assert fake.total_calls() == 4

        page.goto(f"/jobs/{job_id}/items/{item_id}")
        takes = page.locator("#takes tbody tr")
        expect(takes).to_have_count(2)
        expect(takes.first).to_contain_text("current")
        expect(page.get_by_label("Take 1 of line 2")).to_be_attached()
        shoot(page, "item-takes-1280.png")
        page.get_by_role("button", name="Restore take 1").click()
        expect(page.locator(".flash-ok")).to_contain_text("Take 1 is current again")
        expect(page.locator("#item-text")).to_have_value("The next station is Central.")
        assert fake.total_calls() == 4  # a restore sends nothing

    for phone in new_tab(browser, app.base_url, width=PHONE):
        sign_in(phone)
        for path, name in (
            (f"/jobs/{job_id}/items/{item_id}", "item-takes-390.png"),
            (f"/jobs/{job_id}/selection?items={item_id}", "regenerate-selection-390.png"),
            (f"/jobs/{job_id}", "job-edited-390.png"),
        ):
            phone.goto(path)
            shoot(phone, name)
            no_sideways_scroll(phone)


def test_delete_a_job_after_confirming(
    browser: Browser, fake_server: tuple[GunicornServer, str, FakeProvider]
) -> None:
    app, token, _ = fake_server
    api = ApiClient(app.base_url, token)
    job_id = api.create_job(["Short lived."], title="To delete")["id"]
    dialogs: list[str] = []

    def answer(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        if len(dialogs) == 1:
            dialog.dismiss()
        else:
            dialog.accept()

    for page in new_tab(browser, app.base_url):
        sign_in(page)
        page.goto(f"/jobs/{job_id}")
        page.on("dialog", answer)
        page.click("#btn-delete")  # dismissed: nothing happens
        expect(page).to_have_url(re.compile(rf"/jobs/{job_id}$"))
        page.click("#btn-delete")
        expect(page.locator(".flash-ok")).to_contain_text("Job deleted")
        assert "cannot be undone" in dialogs[0]
    assert api.request("GET", f"/api/jobs/{job_id}").status_code == 404


def test_change_the_voice_and_options_by_keyboard(
    browser: Browser, fake_server: tuple[GunicornServer, str, FakeProvider]
) -> None:
    app, token, fake = fake_server
    api = ApiClient(app.base_url, token)
    job_id = api.create_job(LINES, title="Another voice")["id"]
    assert api.generate(job_id).status_code == 202
    api.wait_for(lambda: api.get_job(job_id)["status"] == "COMPLETED", timeout=20)
    calls = fake.total_calls()

    for page in new_tab(browser, app.base_url):
        sign_in(page)
        page.goto(f"/jobs/{job_id}")
        expect(page.locator("#settings-form")).to_be_hidden()
        page.focus("#job-settings summary")
        page.keyboard.press("Enter")  # opens the folded form
        expect(page.locator("#settings-note")).to_contain_text("makes 3 done lines stale")
        page.keyboard.press("Tab")
        expect(page.get_by_label("Voice", exact=True)).to_be_focused()
        page.keyboard.press("ArrowDown")
        expect(page.get_by_label("Voice", exact=True)).to_have_value("echo")
        page.keyboard.press("Tab")
        page.keyboard.type("1.25")
        page.keyboard.press("Tab")
        page.keyboard.type("Slowly, like a station announcer.")
        shoot(page, "job-settings-1280.png")
        page.keyboard.press("Tab")
        expect(page.locator("#btn-save-settings")).to_be_focused()
        page.keyboard.press("Enter")
        expect(page.locator(".flash-ok")).to_contain_text("Voice and options saved")
        expect(page.locator("#item-filters [data-count=stale]")).to_have_text("3")
        expect(page.locator("#btn-regenerate-stale")).to_contain_text("Regenerate 3 stale lines")
    job = api.get_job(job_id)
    assert job["voice"] == "echo"
    assert job["options"] == {"speed": 1.25, "instructions": "Slowly, like a station announcer."}
    assert fake.total_calls() == calls  # a change sends nothing

    for phone in new_tab(browser, app.base_url, width=PHONE):
        sign_in(phone)
        phone.goto(f"/jobs/{job_id}")
        phone.click("#job-settings summary")
        expect(phone.get_by_label("Voice", exact=True)).to_have_value("echo")
        shoot(phone, "job-settings-390.png")
        no_sideways_scroll(phone)
