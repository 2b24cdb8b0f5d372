"""The job page's cast in a real browser against gunicorn (fake provider): each speaker
with their lines and voice, one speaker's voice changed by keyboard, exactly their lines
stale, nothing sent. Screenshots at 1280 and 390 px go to $SPEECHBATCH_SCREENSHOT_DIR."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.test_browser_edits import browser, fake_server, no_sideways_scroll, shoot
from tests.support.browser import PHONE, new_tab, sign_in
from tests.support.fake_provider import FakeProvider
from tests.support.server import ApiClient, GunicornServer

pytestmark = pytest.mark.e2e

__all__ = ["browser", "fake_server"]  # fixtures shared with the edits' browser test

SCENE = [
    "The station was quiet that night.",
    {"text": "Is this the last train?", "speaker": "Alice"},
    {"text": "It is, miss. Mind the gap.", "speaker": "Conductor"},
    {"text": "Then I had better hurry.", "speaker": "Alice"},
]


def test_the_cast_shows_each_speaker_and_changes_one_voice(
    browser: Browser, fake_server: tuple[GunicornServer, str, FakeProvider]
) -> None:
    app, token, fake = fake_server
    api = ApiClient(app.base_url, token)
    body = {"title": "Last train", "voice": "alloy", "items": SCENE, "cast": {"Alice": "echo"}}
    created = api.request("POST", "/api/jobs", body)
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    assert api.generate(job_id).status_code == 202
    api.wait_for(lambda: api.get_job(job_id)["status"] == "COMPLETED", timeout=20)
    calls = fake.total_calls()

    for page in new_tab(browser, app.base_url):
        sign_in(page)
        page.goto(f"/jobs/{job_id}")
        cast = page.locator("#cast")
        expect(cast.locator("tbody tr")).to_have_count(2)
        expect(cast.locator("tr[data-speaker='Alice']")).to_contain_text("2")
        expect(page.get_by_label("Voice of Alice", exact=True)).to_have_value("echo")
        expect(page.get_by_label("Voice of Conductor", exact=True)).to_have_value("")
        expect(page.locator("#items .item-speaker").first).to_have_text("Alice")
        shoot(page, "job-cast-1280.png")
        page.focus("#cast tr[data-speaker='Conductor'] select")
        page.keyboard.press("End")  # the last voice: echo
        expect(page.get_by_label("Voice of Conductor", exact=True)).to_have_value("echo")
        page.keyboard.press("Tab")
        expect(page.get_by_role("button", name="Save the voice of Conductor")).to_be_focused()
        page.keyboard.press("Enter")
        expect(page.locator(".flash-ok")).to_contain_text("Conductor's voice saved")
        expect(page.locator("#item-filters [data-count=stale]")).to_have_text("1")
        expect(page.get_by_label("Voice of Conductor", exact=True)).to_have_value("echo")
        shoot(page, "job-cast-saved-1280.png")
    job = api.get_job(job_id)
    assert job["cast"] == {"Alice": "echo", "Conductor": "echo"}
    assert [i["text"] for i in job["items"] if i["stale"]] == ["It is, miss. Mind the gap."]
    assert fake.total_calls() == calls  # a change sends nothing

    for phone in new_tab(browser, app.base_url, width=PHONE):
        sign_in(phone)
        phone.goto(f"/jobs/{job_id}")
        expect(phone.get_by_label("Voice of Alice", exact=True)).to_be_visible()
        shoot(phone, "job-cast-390.png")
        no_sideways_scroll(phone)
