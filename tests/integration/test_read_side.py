"""Readers cannot write; writers after readers can; requests share one read transaction."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import ScalarResult, text, update
from sqlalchemy.exc import DBAPIError

from speechbatch.adapters.models import Job
from speechbatch.adapters.read import ItemsPage, JobPoll
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import create_admin, create_token, get_user, hash_token
from tests.helpers import concrete, new_job, statement_reader


def test_a_write_inside_a_reader_fails(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin)
    with concrete(svc.uow_factory)(read_only=True) as uow, pytest.raises(DBAPIError):
        uow.session.execute(update(Job).where(Job.id == job_id).values(title="changed"))
    with concrete(svc.uow_factory)(read_only=True) as uow:
        title: str = uow.session.execute(text("SELECT title FROM jobs")).scalar_one()
    assert title == "job"


def test_a_repository_write_inside_a_reader_fails(svc: Services, admin: UserRecord) -> None:
    with svc.uow_factory(read_only=True) as uow, pytest.raises(DBAPIError):
        uow.tokens.create(admin.id, "0" * 64, "reader", "sb_0000")


def test_a_reader_has_no_commit(svc: Services) -> None:
    with svc.uow_factory(read_only=True) as uow:
        assert not hasattr(uow, "commit")


def test_a_writer_after_readers_on_the_same_pool_can_write(
    svc: Services, admin: UserRecord
) -> None:
    job_id = new_job(svc, admin)
    for _ in range(3):  # pooled connections go back and forth between readers and writers
        with svc.uow_factory(read_only=True) as uow:
            uow.views.ping()
        with concrete(svc.uow_factory)() as uow:
            uow.session.execute(update(Job).where(Job.id == job_id).values(title="renamed"))
            uow.commit()
    with concrete(svc.uow_factory)(read_only=True) as uow:
        assert uow.session.execute(text("SELECT title FROM jobs")).scalar_one() == "renamed"


def test_a_session_lookup_reads_while_another_process_writes(
    svc: Services, admin: UserRecord
) -> None:
    """get_user (every signed-in page) is a read: it never waits for a writer's lock
    (on SQLite the database-wide write lock, on PostgreSQL the user's row lock)."""
    with svc.engine.connect() as holder:
        # SQLite writers begin IMMEDIATE: this connection now holds the write lock.
        holder.exec_driver_sql("UPDATE users SET email = email")
        assert get_user(svc.uow_factory, admin.id) == admin
        holder.rollback()


def _poll(svc: Services, job_id: int, **kwargs: Any) -> JobPoll | None:
    with svc.uow_factory.statement_reader() as uow:
        return uow.views.poll_job(job_id, lease_seconds=60.0, worker_dead_seconds=60.0, **kwargs)


def test_a_write_through_a_statement_reader_fails(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin)
    with statement_reader(svc.uow_factory) as uow, pytest.raises(DBAPIError):
        uow.session.execute(update(Job).where(Job.id == job_id).values(title="changed"))
    with statement_reader(svc.uow_factory) as uow:
        assert uow.session.execute(text("SELECT title FROM jobs")).scalar_one() == "job"


def test_a_poll_by_token_reads_the_user_the_head_and_the_document(
    svc: Services, admin: UserRecord, token: str
) -> None:
    job_id = new_job(svc, admin, 2)
    poll = _poll(svc, job_id, token_hash=hash_token(token))
    assert poll is not None and poll.user == admin
    assert poll.head is not None and poll.head.total == 2
    assert poll.document is not None and len(json.loads(poll.document)["items"]) == 2


def test_a_poll_by_an_unknown_token_reads_nothing(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin)
    assert _poll(svc, job_id, token_hash=hash_token("sb_unknown")) is None


def test_a_poll_of_another_organizations_job_reads_no_head_nor_document(
    svc: Services, admin: UserRecord, token: str
) -> None:
    create_admin(svc.uow_factory, "other", "admin@other.test", "password-1")
    other_token = create_token(svc.uow_factory, "admin@other.test")
    job_id = new_job(svc, admin)
    poll = _poll(svc, job_id, token_hash=hash_token(other_token))
    assert poll is not None and poll.user is not None and poll.user.email == "admin@other.test"
    assert poll.head is None and poll.document is None


def test_a_poll_of_the_version_the_client_has_builds_no_document(
    svc: Services, admin: UserRecord
) -> None:
    job_id = new_job(svc, admin)
    first = _poll(svc, job_id, organization_id=admin.organization_id)
    assert first is not None and first.head is not None
    again = _poll(
        svc, job_id, organization_id=admin.organization_id, seen_version=first.head.version
    )
    assert again is not None and again.head == first.head and again.document is None


def test_a_poll_of_an_items_page_builds_that_page(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin, 5)
    poll = _poll(svc, job_id, organization_id=admin.organization_id, page=ItemsPage(None, 1, 2))
    assert poll is not None and poll.document is not None
    assert [i["text"] for i in json.loads(poll.document)] == ["text 2", "text 3"]


# --- timestamps in the JSON the database builds -----------------------------------------


@pytest.mark.parametrize("moment", [
    datetime(2026, 12, 1, 21, 5, 9, tzinfo=UTC),
    datetime(2026, 12, 1, 21, 5, 9, 120, tzinfo=UTC),
    datetime(1999, 1, 2, 3, 4, 5, 999999, tzinfo=UTC),
])  # fmt: skip
def test_the_json_writes_timestamps_in_iso_8601_with_microseconds(
    svc: Services, admin: UserRecord, moment: datetime
) -> None:
    job_id = new_job(svc, admin)
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(update(Job).where(Job.id == job_id).values(started_at=moment))
        uow.commit()
    with svc.uow_factory(read_only=True) as uow:
        document = json.loads(uow.views.job_json(job_id, with_items=True))
    # Always six digits (whole seconds too), on both databases.
    assert document["started_at"] == moment.isoformat(timespec="microseconds")


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_sb_isotime_is_inlined_by_the_planner(svc: Services) -> None:
    with concrete(svc.uow_factory)(read_only=True) as uow:
        plan: ScalarResult[str] = uow.session.execute(
            text("EXPLAIN VERBOSE SELECT sb_isotime(created_at) FROM jobs")
        ).scalars()
        output = "\n".join(plan)
    assert "to_char" in output and "sb_isotime" not in output, output
