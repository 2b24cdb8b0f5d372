"""Organization-level job locks: one live holder, expiry reclaimed atomically, fencing by id.

Every test runs on SQLite and on PostgreSQL. Concurrency tests use real threads, each with
its own session on a shared engine. On PostgreSQL the ``acquire_job_lock`` function is
also called directly with SQL, as another service would (CONTRACT.md, "Database API").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from alembic import command
from sqlalchemy import Engine, func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from speechbatch.adapters.db import ago, make_engine, make_session_factory
from speechbatch.adapters.migrate import alembic_config
from speechbatch.adapters.repositories.job_locks import JobLockGrant, LockRepository, job_locks
from speechbatch.errors import LockHeld

T = TypeVar("T")
ORG = 1
JOB_TYPE = "audio_export"
RACERS = 24
RECLAIMERS = 20
ACQUIRE_SQL = text("SELECT * FROM acquire_job_lock(:o, :t, :h, :ttl)")


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine of its own on this test's database (one session per thread)."""
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    """Sessions on the shared engine."""
    return make_session_factory(engine)


def acquire(
    sessions: sessionmaker[Session],
    holder: str = "holder-a",
    ttl: float = 60.0,
    *,
    org: int = ORG,
    job_type: str = JOB_TYPE,
) -> JobLockGrant:
    """Acquire in a transaction of its own and commit."""
    with sessions() as session:
        grant = LockRepository(session).acquire(org, job_type, holder, ttl)
        session.commit()
    return grant


def expire(sessions: sessionmaker[Session], lock_id: int) -> None:
    """Make a grant's lease run out, by the database's clock."""
    with sessions() as session:
        session.execute(
            update(job_locks).where(job_locks.c.id == lock_id).values(expires_at=ago(1))
        )
        session.commit()


def rows(sessions: sessionmaker[Session]) -> dict[int, Any]:
    """Every lock row by id."""
    with sessions() as session:
        return {r.id: r for r in session.execute(select(*job_locks.c).order_by(job_locks.c.id))}


def live_ids(
    sessions: sessionmaker[Session], org: int = ORG, job_type: str = JOB_TYPE
) -> list[int]:
    """Ids of the unreleased rows of a pair."""
    return [
        r.id
        for r in rows(sessions).values()
        if r.organization_id == org and r.job_type == job_type and r.released_at is None
    ]


def race(n: int, attempt: Callable[[int], T]) -> list[T | BaseException]:
    """Run ``attempt(i)`` in ``n`` threads released together; return results or errors."""
    barrier = threading.Barrier(n)
    results: list[T | BaseException] = [RuntimeError("did not run")] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = attempt(i)
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def direct_call(sessions: sessionmaker[Session], holder: str, ttl: int = 60) -> Any:
    """Call the SQL function as another service would, and commit."""
    with sessions() as session:
        row = session.execute(ACQUIRE_SQL, {"o": ORG, "t": JOB_TYPE, "h": holder, "ttl": ttl}).one()
        session.commit()
    return row


# The acquire_job_lock() SQL function exists on PostgreSQL only.
postgresql_only = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


# --- one live holder ----------------------------------------------------------------------


def test_concurrent_acquirers_get_exactly_one_grant(sessions: sessionmaker[Session]) -> None:
    results = race(RACERS, lambda i: acquire(sessions, f"holder-{i}"))

    grants = [r for r in results if isinstance(r, JobLockGrant)]
    refused = [r for r in results if isinstance(r, LockHeld)]
    assert len(grants) == 1, results
    assert len(refused) == RACERS - 1, results
    assert live_ids(sessions) == [grants[0].id]
    assert len(rows(sessions)) == 1


@postgresql_only
def test_concurrent_sql_callers_get_one_grant_and_unique_violations(
    sessions: sessionmaker[Session],
) -> None:
    results = race(RACERS, lambda i: direct_call(sessions, f"other-service-{i}"))

    granted = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, IntegrityError)]
    assert len(granted) == 1, results
    assert len(refused) == RACERS - 1, results
    assert {getattr(e.orig, "sqlstate", None) for e in refused} == {"23505"}
    assert live_ids(sessions) == [granted[0].id]


@postgresql_only
def test_direct_call_on_a_live_lock_raises_unique_violation(
    sessions: sessionmaker[Session],
) -> None:
    first = direct_call(sessions, "service-a")

    with pytest.raises(IntegrityError) as caught:
        direct_call(sessions, "service-b")

    assert getattr(caught.value.orig, "sqlstate", None) == "23505"
    assert first.holder == "service-a"
    assert first.expires_at > first.acquired_at
    assert live_ids(sessions) == [first.id]


def test_live_lock_is_never_reclaimed(sessions: sessionmaker[Session]) -> None:
    grant = acquire(sessions, "holder-a", ttl=60)
    before = rows(sessions)[grant.id]

    with pytest.raises(LockHeld):
        acquire(sessions, "holder-b", ttl=60)

    after = rows(sessions)[grant.id]
    assert after.released_at is None
    assert after.expires_at == before.expires_at
    assert after.holder == "holder-a"
    assert live_ids(sessions) == [grant.id]


def test_locks_are_per_organization_and_job_type(sessions: sessionmaker[Session]) -> None:
    a = acquire(sessions, "a")
    b = acquire(sessions, "b", org=ORG + 1)
    c = acquire(sessions, "c", job_type="other_job")

    assert len({a.id, b.id, c.id}) == 3
    assert all(r.released_at is None for r in rows(sessions).values())


def test_lock_held_leaves_the_surrounding_transaction_usable(
    sessions: sessionmaker[Session],
) -> None:
    acquire(sessions, "holder-a")

    with sessions() as session:
        locks = LockRepository(session)
        first = locks.acquire(ORG, "first_type", "me", 60)
        with pytest.raises(LockHeld):
            locks.acquire(ORG, JOB_TYPE, "me", 60)
        second = locks.acquire(ORG, "second_type", "me", 60)
        session.commit()

    stored = rows(sessions)
    assert stored[first.id].released_at is None
    assert stored[second.id].released_at is None


# --- expiry -------------------------------------------------------------------------------


def test_expired_lock_is_reclaimed_in_one_step(sessions: sessionmaker[Session]) -> None:
    old = acquire(sessions, "holder-a")
    expire(sessions, old.id)

    new = acquire(sessions, "holder-b")

    stored = rows(sessions)
    assert new.id != old.id
    assert new.holder == "holder-b"
    assert stored[old.id].released_at is not None
    assert stored[new.id].released_at is None
    assert live_ids(sessions) == [new.id]


@postgresql_only
def test_sql_function_reclaims_an_expired_lock_in_one_call(sessions: sessionmaker[Session]) -> None:
    old = direct_call(sessions, "service-a")
    expire(sessions, old.id)

    new = direct_call(sessions, "service-b", ttl=30)

    assert new.id != old.id
    assert new.holder == "service-b"
    assert rows(sessions)[old.id].released_at is not None
    assert live_ids(sessions) == [new.id]
    with sessions() as session:
        seconds = session.execute(
            select(func.extract("epoch", job_locks.c.expires_at - job_locks.c.acquired_at)).where(
                job_locks.c.id == new.id
            )
        ).scalar_one()
    assert 29.9 < float(seconds) < 30.1


def test_concurrent_reclaimers_of_an_expired_lock_get_one_winner(
    sessions: sessionmaker[Session],
) -> None:
    old = acquire(sessions, "holder-dead")
    expire(sessions, old.id)

    results = race(RECLAIMERS, lambda i: acquire(sessions, f"reclaimer-{i}"))

    grants = [r for r in results if isinstance(r, JobLockGrant)]
    refused = [r for r in results if isinstance(r, LockHeld)]
    assert len(grants) == 1, results
    assert len(refused) == RECLAIMERS - 1, results
    stored = rows(sessions)
    assert stored[old.id].released_at is not None
    assert live_ids(sessions) == [grants[0].id]
    assert len(stored) == 2


@postgresql_only
def test_concurrent_sql_reclaimers_of_an_expired_lock_get_one_winner(
    sessions: sessionmaker[Session],
) -> None:
    old = direct_call(sessions, "service-dead")
    expire(sessions, old.id)

    results = race(RECLAIMERS, lambda i: direct_call(sessions, f"service-{i}"))

    granted = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, IntegrityError)]
    assert len(granted) == 1, results
    assert len(refused) == RECLAIMERS - 1, results
    assert {getattr(e.orig, "sqlstate", None) for e in refused} == {"23505"}
    assert live_ids(sessions) == [granted[0].id]


# --- renew, release and fencing by lock id -----------------------------------------------


def test_renew_extends_a_live_lock(sessions: sessionmaker[Session]) -> None:
    grant = acquire(sessions, "holder-a", ttl=5)

    with sessions() as session:
        won = LockRepository(session).renew(grant.id, "holder-a", 120)
        session.commit()

    assert won
    assert (rows(sessions)[grant.id].expires_at - grant.expires_at).total_seconds() > 100


def test_renew_by_another_holder_changes_nothing(sessions: sessionmaker[Session]) -> None:
    grant = acquire(sessions, "holder-a", ttl=5)

    with sessions() as session:
        won = LockRepository(session).renew(grant.id, "holder-b", 120)
        session.commit()

    assert not won
    assert rows(sessions)[grant.id].expires_at == grant.expires_at


def test_expired_lock_cannot_be_renewed_even_before_it_is_reclaimed(
    sessions: sessionmaker[Session],
) -> None:
    grant = acquire(sessions, "holder-a")
    expire(sessions, grant.id)
    expired_at = rows(sessions)[grant.id].expires_at

    with sessions() as session:
        won = LockRepository(session).renew(grant.id, "holder-a", 60)
        session.commit()

    assert not won
    assert rows(sessions)[grant.id].expires_at == expired_at


def test_stale_lock_id_renew_and_release_change_nothing(sessions: sessionmaker[Session]) -> None:
    old = acquire(sessions, "holder-a")
    expire(sessions, old.id)
    new = acquire(sessions, "holder-b")
    before = rows(sessions)

    with sessions() as session:
        locks = LockRepository(session)
        renewed = locks.renew(old.id, "holder-a", 600)
        released = locks.release(old.id)
        session.commit()

    assert not renewed
    assert not released
    assert rows(sessions) == before
    assert live_ids(sessions) == [new.id]


def test_release_frees_the_lock_once(sessions: sessionmaker[Session]) -> None:
    grant = acquire(sessions, "holder-a")

    with sessions() as session:
        first = LockRepository(session).release(grant.id)
        session.commit()
    with sessions() as session:
        second = LockRepository(session).release(grant.id)
        session.commit()
    next_grant = acquire(sessions, "holder-b")

    assert first
    assert not second
    assert live_ids(sessions) == [next_grant.id]


# --- the migration -------------------------------------------------------------------------


@postgresql_only
def test_downgrade_drops_the_function_and_upgrade_restores_it(
    database_url: str, engine: Engine
) -> None:
    exists = text("SELECT count(*) FROM pg_proc WHERE proname = 'acquire_job_lock'")

    command.downgrade(alembic_config(database_url), "0001")
    with engine.connect() as conn:
        after_downgrade: int = conn.execute(exists).scalar_one()
    command.upgrade(alembic_config(database_url), "head")
    with engine.connect() as conn:
        after_upgrade: int = conn.execute(exists).scalar_one()

    assert after_downgrade == 0
    assert after_upgrade == 1
