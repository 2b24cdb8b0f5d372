"""Readers cannot write; writers after readers can; requests share one read transaction."""

from __future__ import annotations

import pytest
from sqlalchemy import text, update
from sqlalchemy.exc import DBAPIError

from speechbatch.app import Services
from speechbatch.models import Job
from speechbatch.repositories import UserRecord
from speechbatch.services import get_user
from tests.helpers import new_job


def test_a_write_inside_a_reader_fails(svc: Services, admin: UserRecord) -> None:
    job_id = new_job(svc, admin)
    with svc.uow_factory(read_only=True) as uow, pytest.raises(DBAPIError):
        uow.session.execute(update(Job).where(Job.id == job_id).values(title="changed"))
    with svc.uow_factory(read_only=True) as uow:
        title = uow.session.execute(text("SELECT title FROM jobs")).scalar_one()
    assert title == "job"


def test_a_repository_write_inside_a_reader_fails(svc: Services, admin: UserRecord) -> None:
    with svc.uow_factory(read_only=True) as uow, pytest.raises(DBAPIError):
        uow.users.create_token(admin.id, "0" * 64)


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
        with svc.uow_factory() as uow:
            uow.session.execute(update(Job).where(Job.id == job_id).values(title="renamed"))
            uow.commit()
    with svc.uow_factory(read_only=True) as uow:
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
