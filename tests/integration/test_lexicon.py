"""The pronunciation lexicon, on SQLite and PostgreSQL: rules per organization, what is
sent, billed and estimated, the stale marks after a change (against a brute-force
recomputation), a change while a run is sending, and the /lexicon page."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.domain.lexicon import Rule
from speechbatch.runner import impact_pass, stale_pass
from speechbatch.services import editing, lexicon, spending
from tests.fakes import FakeProvider
from tests.helpers import claim, view, wait_for
from tests.integration.test_pages import sign_in, text_of
from tests.integration.test_spending import (
    GatedProvider,
    finished,
    job_of,
    other_admin,
    run,
    usage,
)
from tests.unit.test_lexicon_rules import by_hand

SQL = {"match": "SQL", "say": "sequel"}


def put(client: FlaskClient, auth: dict[str, str], rules: list[dict[str, Any]]) -> Any:
    return client.put("/api/lexicon", json={"rules": rules}, headers=auth)


def passes_done(svc: Services, user: UserRecord) -> None:
    """Wait for the stale marks of the newest rules to be written."""
    wait_for(lambda: lexicon.get_lexicon(svc.uow_factory, user)["stale_pass"] == "done")


def impact(
    svc: Services, client: FlaskClient, auth: dict[str, str], rules: list[dict[str, Any]]
) -> dict[str, Any]:
    """Ask what ``rules`` would make stale (202 and where to read it), count it here (or
    on the thread the POST nudged), and read the counts."""
    asked = client.post("/api/lexicon/impact", json={"rules": rules}, headers=auth)
    assert asked.status_code == 202, asked.get_json()
    body = asked.get_json()
    assert body["status"] == "pending" and asked.headers["Location"] == body["url"]
    impact_pass.run_due_impacts(svc.uow_factory, svc.limits.max_chars)
    wait_for(lambda: client.get(body["url"], headers=auth).get_json()["complete"])
    answer: dict[str, Any] = client.get(body["url"], headers=auth).get_json()
    assert answer["id"] == body["id"]
    return answer


def stale_of(svc: Services, user: UserRecord, job_id: int) -> list[bool]:
    return [item["stale"] for item in view(svc, user, job_id)["items"]]


def test_rules_are_read_replaced_and_previewed_per_organization(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord
) -> None:
    empty = client.get("/api/lexicon", headers=auth).get_json()
    assert empty == {"rules": [], "version": 0, "stale_pass": "done"}
    saved = put(client, auth, [SQL, {"match": r"Dr\.", "say": "Doctor", "regex": True}])
    assert saved.status_code == 200, saved.get_json()
    body = saved.get_json()
    assert body["version"] == 1
    assert body["rules"][0] == {**SQL, "regex": False, "case_sensitive": False}
    assert put(client, auth, [SQL]).get_json()["version"] == 2
    preview = client.post(
        "/api/lexicon/preview", json={"text": "sql and SQLite, Dr. Who"}, headers=auth
    )
    # Whole words only, any case by default; the regex rule is gone since version 2.
    assert preview.get_json() == {"spoken_text": "sequel and SQLite, Dr. Who"}

    other = other_admin(svc)
    assert lexicon.get_lexicon(svc.uow_factory, other)["rules"] == []
    limit = svc.limits.max_chars
    assert lexicon.preview(svc.uow_factory, other, {"text": "SQL"}, limit) == {"spoken_text": "SQL"}


@pytest.mark.parametrize(
    ("rule", "words"),
    [
        ({"match": "(", "say": "x", "regex": True}, "does not compile"),
        ({"match": "a*", "say": "x", "regex": True}, "empty"),
        ({"match": "x", "say": "y" * 1001}, "at most 1,000"),
        ({"match": "x" * 201, "say": "x"}, "1 to 200"),
        ({"match": "", "say": "x"}, "1 to 200"),
        ({"match": "x", "say": "y", "regex": "yes"}, "true or false"),
    ],
)
def test_a_rule_that_cannot_be_used_is_refused_and_nothing_changes(
    client: FlaskClient, auth: dict[str, str], rule: dict[str, Any], words: str
) -> None:
    put(client, auth, [SQL])
    refused = put(client, auth, [SQL, rule])
    assert refused.status_code == 422
    error = refused.get_json()["error"]
    assert error["code"] == "invalid_rule" and "rule 2" in error["message"], error
    assert words in error["message"]
    assert client.get("/api/lexicon", headers=auth).get_json()["version"] == 1


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [(r"(\w+) \1", "backreference \\1"), (r"(?<=Dr)\.", "lookbehind"), (r"a(?!b)", "lookahead")],
)
def test_a_regex_without_linear_time_matching_is_refused_naming_the_construct(
    client: FlaskClient, auth: dict[str, str], pattern: str, construct: str
) -> None:
    refused = put(client, auth, [SQL, {"match": pattern, "say": "x", "regex": True}])
    assert refused.status_code == 422
    error = refused.get_json()["error"]
    assert error["code"] == "unsupported_regex", error
    assert "rule 2" in error["message"] and construct in error["message"], error
    assert client.get("/api/lexicon", headers=auth).get_json()["version"] == 0


def test_more_than_a_thousand_rules_are_refused(client: FlaskClient, auth: dict[str, str]) -> None:
    rules = [{"match": f"w{n}", "say": "x"} for n in range(1001)]
    assert put(client, auth, rules).status_code == 422
    assert put(client, auth, rules[:1000]).status_code == 200


def test_the_provider_is_sent_and_billed_the_spoken_text(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    put(client, auth, [SQL])
    job_id = job_of(svc, admin, ["Learn SQL today.", "SQLite is small."])
    estimate = spending.estimate(svc.uow_factory, svc.settings, svc.provider, admin, job_id)
    assert estimate["characters"] == len("Learn sequel today.") + len("SQLite is small.")
    run(svc, admin, job_id)
    assert provider.calls == {"Learn sequel today.": 1, "SQLite is small.": 1}
    assert usage(svc, admin)["billed_characters"] == estimate["characters"]
    item_id = view(svc, admin, job_id)["items"][0]["id"]
    takes = editing.item_takes(svc.uow_factory, admin, job_id, item_id, 5)["takes"]
    assert takes[0]["text"] == "Learn SQL today."
    assert takes[0]["spoken_text"] == "Learn sequel today."
    # Another organization's job with the same text is sent as it is written.
    other = other_admin(svc)
    run(svc, other, job_of(svc, other, ["Learn SQL today."]))
    assert provider.calls["Learn SQL today."] == 1


def test_a_change_marks_stale_exactly_the_lines_it_changes_and_a_revert_unmarks_them(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord
) -> None:
    job_id = job_of(svc, admin, ["Learn SQL today.", "SQLite is small.", "Nothing here."])
    run(svc, admin, job_id)
    other = other_admin(svc)
    other_job = job_of(svc, other, ["Learn SQL today."])
    run(svc, other, other_job)
    counted = impact(svc, client, auth, [SQL])
    assert counted | {"id": 0} == {
        "id": 0, "status": "done", "lines": 1, "jobs": 1, "checked": 3, "total": 3,
        "complete": True,
    }  # fmt: skip
    put(client, auth, [SQL])
    passes_done(svc, admin)
    assert stale_of(svc, admin, job_id) == [True, False, False]
    assert stale_of(svc, other, other_job) == [False]
    assert view(svc, admin, job_id)["progress"]["stale"] == 1
    put(client, auth, [])
    passes_done(svc, admin)
    assert stale_of(svc, admin, job_id) == [False, False, False]


def test_the_lexicon_pass_never_unmarks_a_line_stale_for_its_voice(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord
) -> None:
    job_id = job_of(svc, admin, ["Learn SQL today.", "Nothing here."])
    run(svc, admin, job_id)
    put(client, auth, [SQL])
    passes_done(svc, admin)
    assert (
        client.patch(f"/api/jobs/{job_id}", json={"voice": "echo"}, headers=auth).status_code == 200
    )
    put(client, auth, [])
    passes_done(svc, admin)
    assert stale_of(svc, admin, job_id) == [True, True]


def test_a_change_while_a_run_is_sending_leaves_its_outdated_lines_stale(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord
) -> None:
    """A PUT lands while two items are in flight with the old rules, and its stale pass
    ends before they finish: the one the new rules change ends stale, the other not."""
    provider = GatedProvider({"Learn SQL today.", "Plain words."})
    svc.runner.provider = provider
    job_id = job_of(svc, admin, ["Learn SQL today.", "Plain words.", "Ready SQL."])
    put(client, auth, [{"match": "ready", "say": "set"}])
    passes_done(svc, admin)
    assert client.post(f"/api/jobs/{job_id}/generate", headers=auth).status_code == 202
    wait_for(lambda: provider.in_flight == 2)
    put(client, auth, [{"match": "ready", "say": "set"}, SQL])
    passes_done(svc, admin)
    provider.release.set()
    job = finished(svc, admin, job_id)
    assert job["status"] == "COMPLETED"
    # Sent with the rules the run began with; marked by the rules that hold now.
    assert provider.calls["Learn SQL today."] == 1 and provider.calls["set SQL."] == 1
    assert stale_of(svc, admin, job_id) == [True, False, True]
    assert job["progress"]["stale"] == 2


def test_a_finish_that_read_the_old_version_is_seen_by_the_pass_of_the_new_one(
    svc: Services, admin: UserRecord, backend: str
) -> None:
    """The tightest interleaving: an item's DONE move reads the version before a PUT
    commits, and commits only after the PUT and the start of its stale pass. The pass
    reads that job only once the move has committed (the job row's lock, or SQLite's
    one writer at a time), so the new take is marked all the same."""
    job_id = job_of(svc, admin, ["Learn SQL today."])
    attempt = claim(svc, admin, job_id)
    assert attempt is not None
    item_id = view(svc, admin, job_id)["items"][0]["id"]
    with svc.uow_factory() as uow:
        assert uow.runs.start_item(job_id, attempt, item_id) is not None
        uow.commit()

    def put_then_pass() -> None:
        with svc.uow_factory() as uow:
            uow.lexicon.replace_rules(admin.organization_id, [Rule("SQL", "sequel")])
            uow.commit()
        stale_pass.run_due_passes(svc.uow_factory, svc.limits.max_chars)

    other = threading.Thread(target=put_then_pass)
    with svc.uow_factory() as uow:
        done = uow.runs.finish_item(
            job_id, attempt, item_id, audio_path=f"jobs/{job_id}/x.mp3", audio_bytes=3,
            audio_sha256="0" * 64, fingerprint="f", spoken_text="Learn SQL today.",
        )  # fmt: skip
        assert done and done.lexicon_version == 0
        other.start()
        if backend == "postgresql":  # the pass waits for the job row
            wait_for(lambda: _waiting_for_a_lock(svc), timeout=5)
        else:  # the PUT waits for the one writer
            time.sleep(0.3)
        uow.commit()
    other.join(20)
    assert lexicon.get_lexicon(svc.uow_factory, admin)["stale_pass"] == "done"
    assert stale_of(svc, admin, job_id) == [True]


def _waiting_for_a_lock(svc: Services) -> bool:
    with svc.engine.connect() as conn:
        waiting: int = conn.exec_driver_sql(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).scalar_one()
    return bool(waiting)


def test_a_job_bigger_than_a_chunk_is_marked_in_several_chunks(
    svc: Services, admin: UserRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stale_pass, "CHUNK", 2)
    job_id = job_of(svc, admin, ["SQL one.", "Two.", "SQL three.", "Four.", "SQL five."])
    run(svc, admin, job_id)
    with svc.uow_factory() as uow:
        uow.lexicon.replace_rules(admin.organization_id, [Rule("SQL", "sequel")])
        uow.commit()
    assert stale_pass.run_due_passes(svc.uow_factory, svc.limits.max_chars) == 1
    assert stale_of(svc, admin, job_id) == [True, False, True, False, True]


def test_the_pass_judges_every_row_after_a_chunk_with_a_line_without_its_take(
    svc: Services, admin: UserRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DONE line whose take row is gone (none should be) in the first chunk: the pass
    still goes on to the lines after that chunk."""
    monkeypatch.setattr(stale_pass, "CHUNK", 2)
    job_id = job_of(svc, admin, ["SQL one.", "SQL two.", "SQL three.", "SQL four."])
    run(svc, admin, job_id)
    second = view(svc, admin, job_id)["items"][1]["id"]
    with svc.engine.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM takes WHERE item_id = {int(second)}")
    with svc.uow_factory() as uow:
        uow.lexicon.replace_rules(admin.organization_id, [Rule("SQL", "sequel")])
        uow.commit()
    assert stale_pass.run_due_passes(svc.uow_factory, svc.limits.max_chars) == 1
    assert stale_of(svc, admin, job_id) == [True, False, True, True]


def test_a_pass_whose_process_died_is_done_again_after_its_lease(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord
) -> None:
    job_id = job_of(svc, admin, ["Learn SQL today."])
    run(svc, admin, job_id)
    with svc.uow_factory() as uow:
        uow.lexicon.replace_rules(admin.organization_id, [Rule("SQL", "sequel")])
        uow.commit()
    with svc.uow_factory() as uow:  # a process claims the pass, then dies
        assert uow.lexicon.claim_stale_pass(1.5) is not None
        uow.commit()
    assert lexicon.get_lexicon(svc.uow_factory, admin)["stale_pass"] == "running"
    limit = svc.limits.max_chars
    assert stale_pass.run_due_passes(svc.uow_factory, limit) == 0  # its lease is live
    wait_for(
        lambda: stale_pass.run_due_passes(svc.uow_factory, limit) == 1, timeout=10, interval=0.2
    )
    assert stale_of(svc, admin, job_id) == [True]
    assert lexicon.get_lexicon(svc.uow_factory, admin)["stale_pass"] == "done"


WORDS = ["alpha", "beta", "gamma", "delta", "SQL"]


def _brute_force(svc: Services, user: UserRecord, rules: list[Rule]) -> dict[int, bool]:
    """The stale predicate for every DONE item, recomputed rule by rule from the rows
    (with Python's re: another engine than the lexicon's)."""
    expected = {}
    with svc.uow_factory(read_only=True) as uow:
        for item in uow.lexicon.done_items(user.organization_id):
            spoken = by_hand(rules, item.text)
            expected[item.id] = item.other_reason or item.take_spoken_text != spoken
    return expected


@pytest.fixture
def corpus(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str]
) -> list[int]:
    texts = [f"{a} {b}." for a in WORDS for b in WORDS]
    jobs = [job_of(svc, admin, texts[:13]), job_of(svc, admin, texts[13:])]
    for job_id in jobs:
        run(svc, admin, job_id)
    client.patch(f"/api/jobs/{jobs[1]}", json={"voice": "echo"}, headers=auth)
    return jobs


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    changes=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(WORDS), st.sampled_from(["", "x", "alpha", "zeta"]), st.booleans()
            ),
            max_size=4,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_stale_marks_after_random_changes_equal_a_brute_force_recomputation(
    svc: Services, admin: UserRecord, corpus: list[int], changes: list[list[tuple[str, str, bool]]]
) -> None:
    for change in changes:
        rules = [Rule(m, say, case_sensitive=cs) for m, say, cs in change]
        with svc.uow_factory() as uow:
            uow.lexicon.replace_rules(admin.organization_id, rules)
            uow.commit()
        stale_pass.run_due_passes(svc.uow_factory, svc.limits.max_chars)
        expected = _brute_force(svc, admin, rules)
        marked = {
            item["id"]: item["stale"]
            for job_id in corpus
            for item in view(svc, admin, job_id)["items"]
        }
        assert marked == expected


# --- the page ------------------------------------------------------------------------


def test_the_page_checks_a_change_before_saving_it_and_previews_a_sentence(
    svc: Services, client: FlaskClient, admin: UserRecord
) -> None:
    csrf = sign_in(client)
    job_id = job_of(svc, admin, ["Learn SQL today.", "Plain words."])
    run(svc, admin, job_id)
    page = text_of(client.get("/lexicon"))
    assert 'href="/lexicon" aria-current="page"' in page and 'id="lexicon-rules"' in page
    rules = "SQL = sequel\nDr\\. = Doctor [regex]\n"
    asked = client.post("/lexicon", data={"rules": rules, "action": "check", "csrf_token": csrf})
    assert asked.status_code == 302 and "/lexicon/check/" in asked.headers["Location"]
    impact_pass.run_due_impacts(svc.uow_factory, svc.limits.max_chars)
    wait_for(lambda: "This change makes" in text_of(client.get(asked.headers["Location"])))
    checked = text_of(client.get(asked.headers["Location"]))
    assert "This change makes <strong>1 line in 1 job</strong> stale" in checked
    assert (
        "SQL = sequel\nDr\\. = Doctor [regex]" in checked and 'http-equiv="refresh"' not in checked
    )
    assert lexicon.get_lexicon(svc.uow_factory, admin)["version"] == 0
    assert client.post("/lexicon", data={"rules": rules, "action": "save"}).status_code == 400
    saved = client.post("/lexicon", data={"rules": rules, "action": "save", "csrf_token": csrf})
    assert saved.status_code == 302
    passes_done(svc, admin)
    assert stale_of(svc, admin, job_id) == [True, False]
    page = text_of(client.get("/lexicon"))
    assert "1 line in 1 job became stale" in page and "Dr\\. = Doctor [regex]" in page
    shown = text_of(client.post("/lexicon/preview", data={"text": "Dr. SQL", "csrf_token": csrf}))
    assert 'Spoken: <q class="break">Doctor sequel</q>' in shown
    bad = client.post(
        "/lexicon", data={"rules": "(a)\\1 = x [regex]", "action": "check", "csrf_token": csrf}
    )
    assert bad.status_code == 422 and "backreference" in text_of(bad)
    assert "&#39;" not in text_of(bad) and "rule 1 “(a)\\1”" in text_of(bad)
