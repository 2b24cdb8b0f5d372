"""Driver errors leave a unit of work as the project's own, SQLAlchemy's as the cause."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from speechbatch.adapters import db
from speechbatch.adapters.uow import SessionUowFactory
from speechbatch.errors import AlreadyExists, DatabaseUnavailable
from speechbatch.runner.transactions import Transactions

INSERT_ORGANIZATION = text("INSERT INTO organizations (slug) VALUES (:slug)")


@pytest.fixture
def uow_factory(database_url: str) -> Iterator[SessionUowFactory]:
    engine = db.make_engine(database_url)
    try:
        yield SessionUowFactory(db.make_session_factory(engine))
    finally:
        engine.dispose()


def test_a_unique_violation_is_already_exists(uow_factory: SessionUowFactory) -> None:
    with uow_factory() as uow:
        uow.session.execute(INSERT_ORGANIZATION, {"slug": "twice"})
        uow.commit()
    with pytest.raises(AlreadyExists) as info, uow_factory() as uow:
        uow.session.execute(INSERT_ORGANIZATION, {"slug": "twice"})
        uow.commit()
    assert isinstance(info.value.__cause__, sa_exc.IntegrityError)
    assert info.value.status == 409


def test_a_busy_row_or_database_is_unavailable(uow_factory: SessionUowFactory) -> None:
    """An impatient writer that waits past lock_timeout (a row held on PostgreSQL, the
    write lock held on SQLite) gets DatabaseUnavailable."""
    with uow_factory() as uow:
        uow.session.execute(INSERT_ORGANIZATION, {"slug": "held"})
        uow.commit()
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with uow_factory() as uow:
            uow.session.execute(text("UPDATE organizations SET slug = 'held' WHERE slug = 'held'"))
            holding.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        with pytest.raises(DatabaseUnavailable) as info, uow_factory.impatient_writer() as uow:
            uow.session.execute(text("UPDATE organizations SET slug = 'x' WHERE slug = 'held'"))
            uow.commit()
        assert isinstance(info.value.__cause__, sa_exc.OperationalError)
        assert info.value.status == 503
    finally:
        done.set()
        holder.join(10)


@pytest.mark.parametrize("read_only", [True, False])
def test_an_unreachable_database_is_unavailable(read_only: bool) -> None:
    engine = db.make_engine("postgresql+psycopg://nobody@127.0.0.1:1/nothing", pool=False)
    uow_factory = SessionUowFactory(db.make_session_factory(engine))
    try:
        unit = uow_factory(read_only=True) if read_only else uow_factory()
        with pytest.raises(DatabaseUnavailable) as info, unit as uow:
            uow.session.execute(text("SELECT 1"))
        assert isinstance(info.value.__cause__, sa_exc.OperationalError)
    finally:
        engine.dispose()


def test_other_errors_pass_through_untouched(uow_factory: SessionUowFactory) -> None:
    with pytest.raises(KeyError), uow_factory() as uow:
        uow.session.execute(text("SELECT 1"))
        raise KeyError("not the database's")


def _idle_past_the_timeout(uow: object) -> None:
    """Idle inside the transaction past PostgreSQL's idle_in_transaction_session_timeout
    (as a process frozen or stalled mid-transaction does), then use it."""
    session = uow.session  # type: ignore[attr-defined]
    session.execute(text("SET LOCAL idle_in_transaction_session_timeout = '100ms'"))
    time.sleep(0.5)
    session.execute(text("SELECT 1"))


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_session_ended_for_idling_in_a_transaction_is_unavailable(
    uow_factory: SessionUowFactory,
) -> None:
    """PostgreSQL ends the session with 25P03, which psycopg raises as an InternalError;
    only the transaction was lost, so it is DatabaseUnavailable (worth a retry), and the
    next unit of work gets a new connection."""
    with pytest.raises(DatabaseUnavailable) as info, uow_factory() as uow:
        _idle_past_the_timeout(uow)
    assert isinstance(info.value.__cause__, sa_exc.InternalError)
    with uow_factory() as uow:
        assert uow.session.execute(text("SELECT 1")).scalar_one() == 1


@pytest.mark.parametrize("backend", ["postgresql"])
def test_the_runner_retries_a_transaction_whose_session_was_ended(
    uow_factory: SessionUowFactory,
) -> None:
    """A runner thread that wakes inside a transaction PostgreSQL has ended tries it again
    on a new connection (and so learns whether its run is fenced) instead of failing."""
    tries = []

    def work(uow: object) -> int:
        tries.append(1)
        if len(tries) == 1:
            _idle_past_the_timeout(uow)
        return len(tries)

    assert Transactions(uow_factory, lambda: False, 5.0)(work) == 2
