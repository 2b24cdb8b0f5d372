"""A lexicon rule that runs out of time, on SQLite and PostgreSQL: the preview and the
dry run answer 422 ``rule_timeout``, the estimate reports the lines, a run ends them
ERROR without sending or billing anything, and the stale pass finishes with them stale.

The time limit is set to zero, so every line of an organization with rules runs out of
time, every time: what the machine's load could do to any line, made certain."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.domain import lexicon as lexicon_module
from speechbatch.services import lexicon, spending
from tests.fakes import FakeProvider
from tests.helpers import view
from tests.integration.test_lexicon import SQL, put, stale_of
from tests.integration.test_spending import job_of, run, usage

TEXTS = ["Learn SQL today.", "Learn SQL today.", "Plain words."]


@pytest.fixture
def no_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rule runs out of time on every text it is applied to."""
    monkeypatch.setattr(lexicon_module, "APPLY_SECONDS", 0.0)


def test_preview_and_impact_answer_422_naming_the_rule_every_time(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    assert put(client, auth, [SQL]).status_code == 200
    run(svc, admin, job_of(svc, admin, ["Plain words."]))
    monkeypatch.setattr(lexicon_module, "APPLY_SECONDS", 0.0)
    for _ in range(20):
        answer = client.post("/api/lexicon/preview", json={"text": "Learn SQL."}, headers=auth)
        assert answer.status_code == 422, answer.get_json()
        error = answer.get_json()["error"]
        assert error["code"] == "rule_timeout"
        assert "rule 1 “SQL” ran out of time on this line" in error["message"]
    dry = client.post("/api/lexicon/impact", json={"rules": [SQL]}, headers=auth)
    assert dry.status_code == 422, dry.get_json()
    assert dry.get_json()["error"]["code"] == "rule_timeout"
    assert "rule 1" in dry.get_json()["error"]["message"]


def test_a_run_ends_the_lines_error_and_sends_and_bills_nothing(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider, no_time: None,
) -> None:  # fmt: skip
    assert put(client, auth, [SQL]).status_code == 200
    job_id = job_of(svc, admin, TEXTS)
    estimate = spending.estimate(svc.uow_factory, svc.settings, svc.provider, admin, job_id)
    assert estimate == {
        "items": 0, "characters": 0, "reused_items": 0, "lexicon_timeouts": 3, "price": None,
    }  # fmt: skip
    job = run(svc, admin, job_id)
    assert job["status"] == "FAILED" and job["runs"][0]["error_message"] == "3 of 3 items failed"
    assert [item["status"] for item in job["items"]] == ["ERROR"] * 3
    for item in job["items"]:
        assert "rule 1 “SQL” ran out of time on this line" in item["error_message"]
    assert provider.calls == {}
    assert usage(svc, admin)["billed_characters"] == 0
    assert job["progress"]["error"] == 3 and job["progress"]["generating"] == 0


def test_the_stale_pass_finishes_with_such_lines_stale(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    job_id = job_of(svc, admin, TEXTS)
    run(svc, admin, job_id)
    monkeypatch.setattr(lexicon_module, "APPLY_SECONDS", 0.0)
    with svc.uow_factory() as uow:  # a PUT without the background pass
        uow.lexicon.replace_rules(admin.organization_id, lexicon.parse_rules([SQL]))
        uow.commit()
    assert lexicon.run_due_passes(svc.uow_factory) == 1
    assert lexicon.get_lexicon(svc.uow_factory, admin)["stale_pass"] == "done"
    # "Plain words." too: nothing shows that its audio says what would be sent now.
    assert stale_of(svc, admin, job_id) == [True, True, True]
    assert view(svc, admin, job_id)["progress"]["stale"] == 3


def test_a_chunk_of_the_stale_pass_stops_at_its_time_and_the_pass_goes_on(
    svc: Services, admin: UserRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk whose lines take long (rules running out of time on each) stops judging
    at CHUNK_SECONDS and writes what it judged; the next chunk goes on from there, so no
    chunk outlasts the pass's lease and every line is marked."""
    job_id = job_of(svc, admin, TEXTS)
    run(svc, admin, job_id)
    monkeypatch.setattr(lexicon_module, "APPLY_SECONDS", 0.0)
    monkeypatch.setattr(lexicon, "CHUNK_SECONDS", 0.0)
    judged: list[int] = []
    split = lexicon.split

    def counted(*args: object, **kwargs: object) -> tuple[list[int], list[int], int]:
        answer = split(*args, **kwargs)  # type: ignore[arg-type]
        judged.append(answer[2])
        return answer

    monkeypatch.setattr(lexicon, "split", counted)
    with svc.uow_factory() as uow:  # a PUT without the background pass
        uow.lexicon.replace_rules(admin.organization_id, lexicon.parse_rules([SQL]))
        uow.commit()
    assert lexicon.run_due_passes(svc.uow_factory) == 1
    assert judged[:3] == [1, 1, 1] and sum(judged) == 3, judged
    assert stale_of(svc, admin, job_id) == [True, True, True]
    assert lexicon.get_lexicon(svc.uow_factory, admin)["stale_pass"] == "done"
