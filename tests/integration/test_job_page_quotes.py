"""What the job page and its neighbours tell the person about to spend or publish: the
stale lines' own quote, the Render warning, the selection's lines, lengths as H:MM:SS,
and the Usage page's words for a free offline voice (Flask test client, both databases)."""

from __future__ import annotations

import html
import re

from flask.testing import FlaskClient

from speechbatch.adapters.models import Item
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import create_job
from tests.fakes import FakeProvider
from tests.helpers import set_items, view
from tests.integration.test_pages import sign_in, text_of
from tests.integration.test_spending import LIMITS, run


def estimates(page: str) -> dict[str, str]:
    """The job page's estimate lines, by button."""
    found = re.findall(r'<li data-estimate="(\w+)">([^<]*)</li>', page)
    return {button: html.unescape(line) for button, line in found}


def two_stale_of_three(svc: Services, admin: UserRecord, client: FlaskClient, csrf: str) -> int:
    """A COMPLETED job of three lines whose voice changed, with two of them still stale."""
    job_id = create_job(svc.uow_factory, admin, "job", "alloy", ["One.", "Two.", "Three."], LIMITS)
    run(svc, admin, job_id)
    body = {"voice": "echo", "speed": "", "instructions": "", "csrf_token": csrf}
    assert client.post(f"/jobs/{job_id}/settings", data=body).status_code == 302
    set_items(svc, job_id, Item.position == 3, stale=False)
    job = view(svc, admin, job_id)
    assert (job["status"], job["progress"]["stale"]) == ("COMPLETED", 2)
    return job_id


def test_the_stale_link_is_quoted_for_the_stale_lines_alone(
    svc: Services, client: FlaskClient, admin: UserRecord
) -> None:
    job_id = two_stale_of_three(svc, admin, client, sign_in(client))
    page = text_of(client.get(f"/jobs/{job_id}"))
    assert "Regenerate 2 stale lines…" in page
    quotes = estimates(page)
    assert quotes["stale"] == "Regenerate 2 stale lines: 2 items, 8 characters"
    assert quotes["regenerate"].startswith("Regenerate every line: 3 items, 14 characters")


def test_render_warns_when_the_job_has_stale_lines(
    svc: Services, client: FlaskClient, admin: UserRecord
) -> None:
    csrf = sign_in(client)
    fresh = create_job(svc.uow_factory, admin, "fresh", "alloy", ["Hello."], LIMITS)
    run(svc, admin, fresh)
    quiet = text_of(client.get(f"/jobs/{fresh}"))
    assert re.search(r'<p class="[^"]*render-stale"[^>]* hidden>', quiet)
    assert 'id="render-form"' in quiet and "Render anyway?" not in quiet

    job_id = two_stale_of_three(svc, admin, client, csrf)
    page = html.unescape(text_of(client.get(f"/jobs/{job_id}")))
    warning = re.search(r'<p class="[^"]*render-stale"[^>]*>(.*?)</p>', page, re.S)
    assert warning and "hidden" not in warning.group(0).split(">")[0]
    assert "2 lines are stale" in warning.group(1)
    assert f'href="/jobs/{job_id}/selection?stale=1"' in warning.group(1)
    form = re.search(r'<form [^>]*id="render-form"[^>]*>', page)
    assert form and 'data-confirm="2 lines are stale: the render would use their old audio' in (
        form.group(0)
    )
    # The button still works: a warning, not a refusal.
    assert re.search(r'id="btn-render" class="btn btn-primary">', page)


def test_the_selection_page_lists_the_chosen_lines(
    svc: Services, client: FlaskClient, admin: UserRecord
) -> None:
    csrf = sign_in(client)
    lines = [
        {"key": "intro", "text": "Welcome aboard."},
        {"key": "middle", "text": "Mind the gap."},
        {"key": "outro", "text": "Goodbye for now."},
    ]
    job_id = create_job(svc.uow_factory, admin, "keys", "alloy", lines, LIMITS)
    run(svc, admin, job_id)
    ids = [item["id"] for item in view(svc, admin, job_id)["items"]]
    page = text_of(client.get(f"/jobs/{job_id}/selection?items={ids[2]}&items={ids[0]}"))
    listed = re.search(r'<table [^>]*id="selection-lines".*?</table>', page, re.S)
    assert listed
    rows = re.findall(r'<tr data-item-id="(\d+)">(.*?)</tr>', listed.group(0), re.S)
    assert [int(item_id) for item_id, _ in rows] == [ids[0], ids[2]]
    assert "intro" in rows[0][1] and "Welcome aboard." in rows[0][1]
    assert "outro" in rows[1][1] and "Goodbye for now." in rows[1][1]
    assert "Mind the gap." not in listed.group(0)

    job_id = two_stale_of_three(svc, admin, client, csrf)
    stale = text_of(client.get(f"/jobs/{job_id}/selection?stale=1"))
    assert "One." in stale and "Two." in stale and "Three." not in stale
    assert stale.count("badge-stale") == 2


def test_lengths_read_as_hours_minutes_and_seconds(
    svc: Services, client: FlaskClient, admin: UserRecord
) -> None:
    sign_in(client)
    job_id = create_job(svc.uow_factory, admin, "long", "alloy", ["A long line."], LIMITS)
    run(svc, admin, job_id)
    item_id = view(svc, admin, job_id)["items"][0]["id"]
    set_items(svc, job_id, duration_seconds=7988.6)
    page = text_of(client.get(f"/jobs/{job_id}/items/{item_id}"))
    assert "<span>2:13:08</span>" in page and "133:08" not in page
    # The players load their length before anyone presses play.
    assert 'preload="metadata"' in page and 'preload="none"' not in page


def test_usage_says_spoken_for_a_free_offline_voice(
    svc: Services, client: FlaskClient, admin: UserRecord, provider: FakeProvider
) -> None:
    sign_in(client)
    run(svc, admin, create_job(svc.uow_factory, admin, "j", "alloy", ["Hello."], LIMITS))
    paid = text_of(client.get("/usage"))
    assert "6</strong> characters billed" in paid
    provider.name = "piper"
    free = text_of(client.get("/usage"))
    assert "6</strong> characters spoken" in free and " billed" not in free
