"""A lexicon cannot multiply the bill, on SQLite and PostgreSQL: a line whose spoken
text the rules would make longer than an item may be is never sent nor billed. The
preview answers 422 ``spoken_text_too_long``, the estimate counts the line in
``too_long_items`` and bills nothing for it, a run ends it ERROR with that message, and
the stale pass marks such a DONE line stale."""

from __future__ import annotations

import time

from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.runner import stale_pass
from speechbatch.services import lexicon, spending
from tests.fakes import FakeProvider
from tests.helpers import view
from tests.integration.test_lexicon import put, stale_of
from tests.integration.test_spending import job_of, run, usage

# The finding: one rule, "a" said as 1,000 characters, on a 4,095-character line.
EXPANDING = {"match": "a", "say": "x" * 1000}
LONG_LINE = ("a " * 2048)[:4095]


def test_a_preview_longer_than_an_item_answers_422_at_once(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    # Three chained rules made a preview answer of 250 MB.
    chained = [
        {"match": "a", "say": "b " * 499},
        {"match": "b", "say": "c " * 499},
        {"match": "c", "say": "d " * 499},
    ]
    assert put(client, auth, chained).status_code == 200
    started = time.monotonic()
    answer = client.post("/api/lexicon/preview", json={"text": "a a a"}, headers=auth)
    assert time.monotonic() - started < 1.0
    assert answer.status_code == 422, answer.get_json()
    error = answer.get_json()["error"]
    assert error["code"] == "spoken_text_too_long"
    assert "more than 4,096 characters" in error["message"]
    assert put(client, auth, [EXPANDING]).status_code == 200
    fits = client.post("/api/lexicon/preview", json={"text": "a a"}, headers=auth)
    assert fits.status_code == 200 and len(fits.get_json()["spoken_text"]) == 2001


def test_a_line_made_too_long_is_quoted_as_such_and_never_sent_nor_billed(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    assert put(client, auth, [EXPANDING]).status_code == 200
    job_id = job_of(svc, admin, [LONG_LINE, "a b", "Plain."])
    estimate = spending.estimate(svc.uow_factory, svc.settings, svc.provider, admin, job_id)
    assert estimate == {
        "items": 2,
        "characters": len("x" * 1000 + " b") + len("Plain."),
        "reused_items": 0,
        "too_long_items": 1,
        "pending_items": 0,
        "price": None,
    }
    job = run(svc, admin, job_id)
    assert job["status"] == "FAILED" and job["runs"][0]["error_message"] == "1 of 3 items failed"
    assert [item["status"] for item in job["items"]] == ["ERROR", "DONE", "DONE"]
    assert "more than 4,096 characters" in job["items"][0]["error_message"]
    assert sorted(provider.calls) == sorted(["x" * 1000 + " b", "Plain."])
    assert usage(svc, admin)["billed_characters"] == estimate["characters"]
    assert job["progress"]["error"] == 1 and job["progress"]["generating"] == 0


def test_the_stale_pass_marks_a_line_made_too_long_stale(svc: Services, admin: UserRecord) -> None:
    job_id = job_of(svc, admin, ["a " * 5, "Plain words."])
    run(svc, admin, job_id)
    with svc.uow_factory() as uow:  # a PUT without the background pass
        uow.lexicon.replace_rules(admin.organization_id, lexicon.parse_rules([EXPANDING]))
        uow.commit()
    assert stale_pass.run_due_passes(svc.uow_factory, svc.limits.max_chars) == 1
    assert lexicon.get_lexicon(svc.uow_factory, admin)["stale_pass"] == "done"
    assert stale_of(svc, admin, job_id) == [True, False]
    assert view(svc, admin, job_id)["progress"]["stale"] == 1
