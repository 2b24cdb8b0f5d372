"""The lexicon's dry runs, on SQLite and PostgreSQL: counted in the background in chunks
(never in the request), exact against a direct computation across jobs and chunks, each
chunk a read that seeks to its cursor, resumed from their cursor when their worker dies,
claimed by one claimer at a time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.impacts import ImpactClaim, ImpactRepository
from speechbatch.app import Services
from speechbatch.domain.lexicon import Lexicon, Rule
from speechbatch.runner import impact_pass
from speechbatch.services import lexicon_impact
from speechbatch.services.lexicon import stale_now
from tests.helpers import wait_for
from tests.integration.test_lexicon import SQL, impact
from tests.integration.test_pages import sign_in, text_of
from tests.integration.test_spending import other_admin

SERIES = "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :n)"


def insert_done_items(svc: Services, org: int, jobs: int, items: int) -> None:
    """``jobs`` COMPLETED jobs of ``items`` DONE items each, with their takes, by bulk
    SQL: one line in ten says "SQL", one in seven is stale already, and one in eleven
    has a take made with other text (stale now for another reason)."""
    with svc.engine.begin() as conn:
        first: int = conn.execute(text("SELECT coalesce(max(id), 0) FROM jobs")).scalar_one()
        conn.execute(
            text(
                f"{SERIES} INSERT INTO jobs (organization_id, title, voice, status, attempt,"
                " items_done, options, version) SELECT :org, 'bulk ' || n, 'alloy',"
                " 'COMPLETED', 1, :items, '{}', 0 FROM g"
            ),
            {"n": jobs, "org": org, "items": items},
        )
        conn.execute(
            text(
                f"{SERIES} INSERT INTO items (job_id, position, text, status, audio_path,"
                " current_take, stale, reused) SELECT jobs.id, n, 'Line ' || n || ' of '"
                " || jobs.id || (CASE WHEN n % 10 = 0 THEN ' is about SQL.' ELSE ' is plain.'"
                " END), 'DONE', 'jobs/' || jobs.id || '/' || n || '.mp3', 1, n % 7 = 0, false"
                " FROM jobs, g WHERE jobs.id > :first"
            ),
            {"n": items, "first": first},
        )
        conn.execute(
            text(
                "INSERT INTO takes (item_id, take, text, spoken_text, voice, options,"
                " audio_path, reused) SELECT items.id, 1, CASE WHEN items.position % 11 = 0"
                " THEN 'other' ELSE items.text END, items.text, 'alloy', '{}',"
                " items.audio_path, false FROM items WHERE items.job_id > :first"
            ),
            {"first": first},
        )


def direct(svc: Services, user: UserRecord, rules: list[Rule]) -> tuple[int, int, int]:
    """(lines, jobs, DONE lines): the dry run's counts computed in one read of every
    DONE item, by the stale predicate itself."""
    lexicon = Lexicon.compile(rules, limit=svc.limits.max_chars)
    lines, jobs, read = 0, set(), 0
    with svc.uow_factory(read_only=True) as uow:
        for item in uow.lexicon.done_items(user.organization_id):
            read += 1
            if not item.stale and stale_now(item, lexicon):
                lines += 1
                jobs.add(item.job_id)
    return lines, len(jobs), read


def ask(svc: Services, user: UserRecord, rules: list[dict[str, Any]]) -> int:
    """A stored dry run (no thread nudged): its id."""
    body = {"rules": rules}
    asked = lexicon_impact.request_impact(svc.uow_factory, user, body, svc.limits.max_chars)
    return int(asked["id"])


def state(svc: Services, user: UserRecord, impact_id: int) -> dict[str, Any]:
    return lexicon_impact.impact_state(svc.uow_factory, user, impact_id)


def test_counts_across_chunks_and_jobs_equal_a_direct_computation(
    svc: Services, admin: UserRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    insert_done_items(svc, admin.organization_id, 7, 150)
    other = other_admin(svc)
    insert_done_items(svc, other.organization_id, 2, 50)  # another organization's lines
    monkeypatch.setattr(impact_pass, "CHUNK", 64)  # chunks that end in the middle of jobs
    impact_id = ask(svc, admin, [SQL, {"match": "Line 3", "say": "x"}])
    while impact_pass.run_due_impacts(svc.uow_factory, svc.limits.max_chars, most=1) == 0:
        pass  # a turn per call: the slices give their lease back
    lines, jobs, read = direct(svc, admin, [Rule("SQL", "sequel"), Rule("Line 3", "x")])
    assert lines > 100 and jobs == 7 and read == 7 * 150
    answer = state(svc, admin, impact_id)
    assert answer == {
        "id": impact_id, "status": "done", "lines": lines, "jobs": jobs, "checked": read,
        "total": read, "complete": True,
    }  # fmt: skip


def test_a_dead_workers_request_is_resumed_from_its_cursor_with_exact_counts(
    svc: Services, admin: UserRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    insert_done_items(svc, admin.organization_id, 3, 100)
    monkeypatch.setattr(impact_pass, "CHUNK", 70)
    impact_id = ask(svc, admin, [SQL])
    with svc.uow_factory() as uow:  # a process claims it, counts a chunk, then dies
        dead = uow.impacts.claim_impact(1.5)
        rows = uow.impacts.done_items_after(admin.organization_id, 0, -1, 70)
        uow.commit()
    assert dead is not None and dead.id == impact_id
    lexicon = Lexicon.compile([Rule("SQL", "sequel")], limit=svc.limits.max_chars)
    first = impact_pass.count(rows, lexicon, impact_pass.ImpactProgress(total=300), 9e9)
    with svc.uow_factory() as uow:
        assert uow.impacts.advance_impact(dead, first, 1.5, False)
        uow.commit()
    midway = state(svc, admin, impact_id)
    assert midway["status"] == "running" and midway["checked"] == 70
    limit = svc.limits.max_chars
    assert impact_pass.run_due_impacts(svc.uow_factory, limit) == 0  # its lease is live
    resumed_from: list[tuple[int, int]] = []
    read = ImpactRepository.done_items_after

    def spy(self: ImpactRepository, org: int, job: int, position: int, n: int) -> Any:
        resumed_from.append((job, position))
        return read(self, org, job, position, n)

    monkeypatch.setattr(ImpactRepository, "done_items_after", spy)
    wait_for(lambda: impact_pass.run_due_impacts(svc.uow_factory, limit) == 1, timeout=10)
    assert resumed_from[0] == (rows[-1].job_id, rows[-1].position)  # from the cursor
    lines, jobs, total = direct(svc, admin, [Rule("SQL", "sequel")])
    done = state(svc, admin, impact_id)
    assert (done["lines"], done["jobs"], done["checked"], done["total"]) == (
        lines, jobs, total, total,
    )  # fmt: skip
    with svc.uow_factory() as uow:  # the dead process's grant writes nothing any more
        assert not uow.impacts.advance_impact(dead, impact_pass.ImpactProgress(), 30, True)
        uow.commit()


def work(svc: Services, read: Callable[[ImpactRepository], object]) -> tuple[int, list[str]]:
    """What ``read`` costs the database, whatever the time, and its statements' plans: on
    SQLite the virtual machine's steps (in hundreds), on PostgreSQL the items its
    statements' scans examined (EXPLAIN ANALYZE: returned or filtered out, every loop)."""
    statements: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        statements.append((statement, params))

    with svc.engine.connect() as conn:
        raw: Any = conn.connection.dbapi_connection
        steps = [0]

        def step() -> int:
            steps[0] += 1
            return 0  # go on

        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            raw.set_progress_handler(step, 100)
        event.listen(conn, "before_cursor_execute", capture)
        read(ImpactRepository(Session(bind=conn)))
        event.remove(conn, "before_cursor_execute", capture)
        if sqlite:
            raw.set_progress_handler(None, 100)
            explain = "EXPLAIN QUERY PLAN "
        else:
            explain = "EXPLAIN (ANALYZE, FORMAT JSON) "
        plans = [conn.exec_driver_sql(explain + s, p).all() for s, p in statements]
    if sqlite:
        return steps[0], [str(row[-1]) for plan in plans for row in plan]
    nodes = [node for plan in plans for node in _nodes(plan[0][0][0]["Plan"])]
    return sum(_examined(node) for node in nodes), [node["Node Type"] for node in nodes]


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _nodes(child))]


def _examined(node: dict[str, Any]) -> int:
    """The items a plan node read (PostgreSQL prints filtered rows per loop). Only items:
    whether the takes are probed or hashed whole is the planner's choice by their size."""
    if node.get("Relation Name") != "items":
        return 0
    filtered = node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    return int((node["Actual Rows"] + filtered) * node["Actual Loops"])


def test_a_chunk_reads_only_the_lines_after_its_cursor(svc: Services, admin: UserRecord) -> None:
    org = admin.organization_id
    insert_done_items(svc, org, 100, 200)
    with svc.engine.connect() as conn:
        newest: list[int] = list(
            conn.execute(
                text("SELECT id FROM jobs WHERE organization_id = :org ORDER BY id DESC LIMIT 2"),
                {"org": org},
            ).scalars()
        )
    last, before = newest
    rows: list[Any] = []
    tail, plans = work(svc, lambda r: rows.extend(r.done_items_after(org, before, 200, 2000)))
    assert [(r.job_id, r.position) for r in rows] == [(last, n) for n in range(1, 201)]
    everything: list[Any] = []
    whole, _ = work(svc, lambda r: everything.extend(r.done_items_after(org, 0, -1, 20_000)))
    assert len(everything) == 20_000
    # The last job's 200 lines cost a small part of reading all 20,000: the read seeks
    # to the cursor and stops at its limit, neither reading nor sorting the rest.
    assert tail * 20 < whole, (tail, whole, plans)
    assert not [p for p in plans if "TEMP B-TREE" in p], plans  # SQLite: no sort at all
    rows.clear()  # from the middle of a job: the rest of it
    work(svc, lambda r: rows.extend(r.done_items_after(org, last, 120, 2000)))
    assert [(r.job_id, r.position) for r in rows] == [(last, n) for n in range(121, 201)]


def test_chunks_read_every_line_once_whatever_the_jobs_done_counters_say(
    svc: Services, admin: UserRecord
) -> None:
    org = admin.organization_id
    insert_done_items(svc, org, 6, 30)
    with svc.engine.begin() as conn:  # counters that under- and overcount: bounds only
        conn.execute(text("UPDATE jobs SET items_done = CASE WHEN id % 2 = 0 THEN 0 ELSE 999 END"))
    read: list[tuple[int, int]] = []
    with svc.uow_factory(read_only=True) as uow:
        every = [(i.job_id, i.position) for i in uow.impacts.done_items_after(org, 0, -1, 10**6)]
        job, position = 0, -1
        while chunk := uow.impacts.done_items_after(org, job, position, 16):
            assert len(chunk) == 16 or len(read) + len(chunk) == 180  # short only at the end
            read += [(i.job_id, i.position) for i in chunk]
            job, position = read[-1]
    assert read == every == sorted(every) and len(set(read)) == 180


def test_two_claimers_never_both_win(svc: Services, admin: UserRecord) -> None:
    ask(svc, admin, [SQL])
    won: list[ImpactClaim | None] = []
    start = threading.Barrier(2)

    def claimer() -> None:
        start.wait()
        with svc.uow_factory() as uow:
            won.append(uow.impacts.claim_impact(30))
            uow.commit()

    threads = [threading.Thread(target=claimer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(won) == 2 and sum(claim is not None for claim in won) == 1
    with svc.uow_factory() as uow:
        assert uow.impacts.claim_impact(30) is None  # nor a third while the lease lives
        uow.commit()


def test_the_request_thread_never_reads_the_lines(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    insert_done_items(svc, admin.organization_id, 10, 1000)
    readers: list[str] = []
    for name in ("done_items_after", "count_done_items"):
        real = getattr(ImpactRepository, name)

        def spy(self: ImpactRepository, *args: Any, real: Any = real) -> Any:
            readers.append(threading.current_thread().name)
            return real(self, *args)

        monkeypatch.setattr(ImpactRepository, name, spy)
    started = time.monotonic()
    asked = client.post("/api/lexicon/impact", json={"rules": [SQL]}, headers=auth)
    took = time.monotonic() - started
    assert asked.status_code == 202 and took < 1.0, took
    url = asked.headers["Location"]
    wait_for(lambda: client.get(url, headers=auth).get_json()["complete"], timeout=60)
    answer = client.get(url, headers=auth).get_json()
    lines, jobs, total = direct(svc, admin, [Rule("SQL", "sequel")])
    assert (answer["lines"], answer["jobs"], answer["total"]) == (lines, jobs, total)
    assert answer["checked"] == total == 10_000
    assert readers and set(readers) == {impact_pass.ImpactPasses.thread_name}


def test_a_request_is_its_organizations_alone_and_bad_rules_are_refused(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str]
) -> None:
    other = other_admin(svc)
    theirs = ask(svc, other, [SQL])
    ours = impact(svc, client, auth, [SQL])
    assert ours["complete"] and ours["total"] == ours["checked"] == 0
    for impact_id in (theirs, ours["id"] + 1000, 2**63, 2**64 + 5):
        missing = client.get(f"/api/lexicon/impact/{impact_id}", headers=auth)
        assert missing.status_code == 404 and missing.get_json()["error"]["code"] == "not_found"
    bad = {"match": "(a)\\1", "say": "x", "regex": True}
    refused = client.post("/api/lexicon/impact", json={"rules": [bad]}, headers=auth)
    assert refused.status_code == 422
    assert refused.get_json()["error"]["code"] == "unsupported_regex"
    assert client.post("/api/lexicon/impact", json={}, headers=auth).status_code == 422


def test_old_requests_are_deleted(svc: Services, admin: UserRecord) -> None:
    kept = ask(svc, admin, [SQL])
    assert impact_pass.clean_old_impacts(svc.uow_factory) == 0
    time.sleep(0.05)
    assert impact_pass.clean_old_impacts(svc.uow_factory, keep_seconds=0.01) == 1
    with svc.uow_factory(read_only=True) as uow:
        assert uow.impacts.impact(admin.organization_id, kept) is None


def test_the_check_page_refreshes_itself_until_counted_and_a_save_says_what_it_made_stale(
    svc: Services, admin: UserRecord, client: FlaskClient
) -> None:
    csrf = sign_in(client)
    insert_done_items(svc, admin.organization_id, 2, 20)
    svc.impact_passes = None  # nothing counts until this test does
    rules = "SQL = sequel\n"
    asked = client.post("/lexicon", data={"rules": rules, "action": "check", "csrf_token": csrf})
    assert asked.status_code == 302
    pending = text_of(client.get(asked.headers["Location"]))
    assert 'http-equiv="refresh"' in pending and "Counting what this change makes stale" in pending
    assert 'data-status="pending"' in pending and "SQL = sequel" in pending
    impact_pass.run_due_impacts(svc.uow_factory, svc.limits.max_chars)
    counted = text_of(client.get(asked.headers["Location"]))
    lines, jobs, _ = direct(svc, admin, [Rule("SQL", "sequel")])
    shown = f"{lines} lines in {jobs} jobs"
    assert 'http-equiv="refresh"' not in counted and f"makes <strong>{shown}</strong>" in counted
    assert f"Save: {shown} become stale" in counted
    data = {"rules": rules, "action": "save", "csrf_token": csrf}
    assert client.post("/lexicon", data=data).status_code == 302
    assert f"Saved as version 1: {shown} became stale" in text_of(client.get("/lexicon"))
    # Rules never checked: the save scans nothing and says the marks are being written.
    data["rules"] = "plain = simple\n"
    assert client.post("/lexicon", data=data).status_code == 302
    page = text_of(client.get("/lexicon"))
    assert "Saved as version 2: the lines it changes are being marked stale" in page
    other = client.get("/lexicon/check/999999")
    assert other.status_code == 404
