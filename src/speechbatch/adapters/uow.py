"""Units of work: a reader that cannot write and a writer that commits.

Each owns one session and its transaction. A writer rolls back at the end unless
``commit()`` was called; a reader that ended well commits its read-only transaction
(nothing to keep, but psycopg answers a ROLLBACK by deallocating the connection's
prepared statements), one that raised rolls back. The reader is enforced by the
database: PostgreSQL runs its transaction READ ONLY (psycopg begins it with ``BEGIN READ
ONLY``), SQLite runs it under ``PRAGMA query_only`` (set at BEGIN whenever it changes, so
a pooled connection never carries it into a writer). Both expose one small repository per
concept.

A statement reader serves a read of ONE statement (the common poll) without the BEGIN
round trip: its engine runs in autocommit (one statement is one snapshot) and its
connections' sessions are read only, so the database still refuses its writes.

Driver errors leave a unit of work (its ``with`` block, ``__enter__``, ``commit``) as the
project's own (``database_error``), with SQLAlchemy's as ``__cause__``: callers catch
``DatabaseUnavailable`` or ``AlreadyExists``, never ``sqlalchemy.exc``.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Literal, Protocol, Self, overload

from sqlalchemy.orm import Session, sessionmaker

from speechbatch.adapters.db import READ_ONLY, SHORT_LOCK_WAIT
from speechbatch.adapters.db_errors import DRIVER_ERRORS, database_error, translated
from speechbatch.adapters.read import DocumentCache, JobViews, Views
from speechbatch.adapters.repositories import (
    Jobs,
    JobsRepository,
    Recovery,
    RecoveryRepository,
    Runs,
    RunsRepository,
    SignInRepository,
    SignIns,
    TokenRepository,
    Tokens,
    Users,
    UsersRepository,
    Workers,
    WorkersRepository,
)
from speechbatch.adapters.repositories.books import BookRepository, Books
from speechbatch.adapters.repositories.cast import CastReads, Casts
from speechbatch.adapters.repositories.deliveries import Deliveries, DeliveriesRepository
from speechbatch.adapters.repositories.edits import Edits, EditsRepository
from speechbatch.adapters.repositories.exports import ExportRepository, Exports
from speechbatch.adapters.repositories.feeds import FeedRepository, Feeds
from speechbatch.adapters.repositories.idempotency import IdempotencyKeys, IdempotencyRepository
from speechbatch.adapters.repositories.impacts import ImpactRepository, Impacts
from speechbatch.adapters.repositories.job_locks import LockRepository, Locks
from speechbatch.adapters.repositories.ledger import Spending, SpendingRepository
from speechbatch.adapters.repositories.lexicon import LexiconRepository, Lexicons
from speechbatch.adapters.repositories.renders import RenderRepository, Renders
from speechbatch.adapters.repositories.resume import ResumeRepository, Resumes
from speechbatch.adapters.repositories.sessions import Sessions, SessionsRepository
from speechbatch.adapters.repositories.slots import SlotReads, SlotRepository
from speechbatch.adapters.repositories.takes import TakeReads, Takes
from speechbatch.adapters.repositories.webhooks import Webhooks, WebhooksRepository


class ReadUnit(Protocol):
    """What services may use to read: repositories whose writes the database refuses.

    Every repository is seen through its Protocol (what the services need of it), which
    the unit tests' fakes implement; the runner writes through ``RunUnit``."""

    @property
    def users(self) -> Users: ...
    @property
    def sessions(self) -> Sessions: ...
    @property
    def recovery(self) -> Recovery: ...
    @property
    def views(self) -> Views: ...
    @property
    def exports(self) -> Exports: ...
    @property
    def renders(self) -> Renders: ...
    @property
    def feeds(self) -> Feeds: ...
    @property
    def books(self) -> Books: ...
    @property
    def spending(self) -> Spending: ...
    @property
    def tokens(self) -> Tokens: ...
    @property
    def resume(self) -> Resumes: ...
    @property
    def slots(self) -> SlotReads: ...
    @property
    def webhooks(self) -> Webhooks: ...
    @property
    def deliveries(self) -> Deliveries: ...
    @property
    def takes(self) -> Takes: ...
    @property
    def cast(self) -> Casts: ...
    @property
    def lexicon(self) -> Lexicons: ...
    @property
    def impacts(self) -> Impacts: ...
    @property
    def idempotency(self) -> IdempotencyKeys: ...

    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class WriteUnit(ReadUnit, Protocol):
    """What services may use to write, and ``commit``."""

    @property
    def jobs(self) -> Jobs: ...
    @property
    def runs(self) -> Runs: ...
    @property
    def locks(self) -> Locks: ...
    @property
    def sign_ins(self) -> SignIns: ...
    @property
    def workers(self) -> Workers: ...
    @property
    def edits(self) -> Edits: ...

    def commit(self) -> None: ...


class RunUnit(Protocol):
    """What the runner writes through: the repositories of a run's moves, as they are
    (the runner is their one user, and the integration tests are where they are proven)."""

    @property
    def runs(self) -> RunsRepository: ...
    @property
    def slots(self) -> SlotRepository: ...
    @property
    def spending(self) -> SpendingRepository: ...
    @property
    def workers(self) -> WorkersRepository: ...
    @property
    def resume(self) -> ResumeRepository: ...
    @property
    def deliveries(self) -> DeliveriesRepository: ...
    @property
    def lexicon(self) -> LexiconRepository: ...

    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    def commit(self) -> None: ...


class RunUowFactory(Protocol):
    """Opens the runner's short writing transactions."""

    def __call__(self) -> RunUnit: ...


class _Unit:
    session: Session

    def __init__(self, session_factory: sessionmaker[Any]) -> None:
        self._session_factory = session_factory

    def _open(self, **execution_options: Any) -> None:
        self.session = self._session_factory()
        if execution_options:
            try:
                with translated():
                    self.session.connection(execution_options=execution_options)
            except BaseException:
                self.session.close()
                raise
        self.users = UsersRepository(self.session)
        self.sessions = SessionsRepository(self.session)
        self.recovery = RecoveryRepository(self.session)
        self.views = JobViews(self.session)
        self.exports = ExportRepository(self.session)
        self.renders = RenderRepository(self.session)
        self.feeds = FeedRepository(self.session)
        self.books = BookRepository(self.session)
        self.locks = LockRepository(self.session)
        self.spending = SpendingRepository(self.session)
        self.tokens = TokenRepository(self.session)
        self.slots = SlotRepository(self.session)
        self.resume = ResumeRepository(self.session)
        self.webhooks = WebhooksRepository(self.session)
        self.deliveries = DeliveriesRepository(self.session)
        self.takes = TakeReads(self.session)
        self.cast = CastReads(self.session)
        self.lexicon = LexiconRepository(self.session)
        self.impacts = ImpactRepository(self.session)
        self.idempotency = IdempotencyRepository(self.session)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            with translated():
                self._end(succeeded=exc_type is None)
        finally:
            self.session.close()
        if isinstance(exc, DRIVER_ERRORS):
            raise database_error(exc) from exc

    def _end(self, succeeded: bool) -> None:
        """End the transaction: a unit that did not commit throws its work away."""
        self.session.rollback()


class Reader(_Unit):
    """A read-only transaction: ``with uow_factory(read_only=True) as uow: ...``.

    It has no ``commit``; a write inside it fails in the database.
    """

    def __enter__(self) -> Reader:
        self._open(**{READ_ONLY: True, "postgresql_readonly": True})
        return self

    def _end(self, succeeded: bool) -> None:
        # A read-only transaction that went well ends with COMMIT, which keeps nothing
        # that ROLLBACK would not: psycopg answers every ROLLBACK by deallocating all of
        # the connection's prepared statements (DEALLOCATE ALL, one more round trip),
        # which the run's statements on that pooled connection then parse and plan again.
        if succeeded:
            self.session.commit()
        else:
            self.session.rollback()


class StatementReader(_Unit):
    """A reader for single statements: no BEGIN, on read-only connections (see above)."""

    def __enter__(self) -> StatementReader:
        self._open()
        return self


class Writer(_Unit):
    """A short writing transaction: ``with uow_factory() as uow: ...; uow.commit()``.

    ``short_lock_wait=True`` (a read's recovery) waits for a busy database no longer than
    PostgreSQL's ``lock_timeout`` on SQLite too, then fails with DatabaseUnavailable.
    """

    def __init__(self, session_factory: sessionmaker[Any], *, short_lock_wait: bool = False):
        super().__init__(session_factory)
        self._short_lock_wait = short_lock_wait

    def __enter__(self) -> Writer:
        self._open(**({SHORT_LOCK_WAIT: True} if self._short_lock_wait else {}))
        self.jobs = JobsRepository(self.session)
        self.runs = RunsRepository(self.session)
        self.workers = WorkersRepository(self.session)
        self.sign_ins = SignInRepository(self.session)
        self.edits = EditsRepository(self.session)
        return self

    def commit(self) -> None:
        """Commit what this unit of work did (DatabaseUnavailable if it could not)."""
        with translated():
            self.session.commit()

    def rollback(self) -> None:
        """Throw away what this unit of work did."""
        with translated():
            self.session.rollback()


class UowFactory(Protocol):
    """``uow_factory()`` opens a writer, ``uow_factory(read_only=True)`` a reader."""

    @overload
    def __call__(self, *, read_only: Literal[False] = ...) -> WriteUnit: ...
    @overload
    def __call__(self, *, read_only: Literal[True]) -> ReadUnit: ...

    def statement_reader(self) -> ReadUnit:
        """A reader for one statement at a time (each its own snapshot)."""
        ...

    def impatient_writer(self) -> WriteUnit:
        """A writer that waits for a busy row or database only ``lock_timeout`` (2 s)."""
        ...


class SessionUowFactory:
    """The app's unit-of-work factory over one session factory (one engine), and the
    statement readers' (``statement_factory``, an engine made with ``statement_reads``)."""

    def __init__(
        self,
        session_factory: sessionmaker[Any],
        statement_factory: sessionmaker[Any] | None = None,
    ) -> None:
        self.session_factory = session_factory
        self.statement_factory = statement_factory

    @overload
    def __call__(self, *, read_only: Literal[False] = ...) -> Writer: ...
    @overload
    def __call__(self, *, read_only: Literal[True]) -> Reader: ...
    def __call__(self, *, read_only: bool = False) -> Reader | Writer:
        if read_only:
            return Reader(self.session_factory)
        return Writer(self.session_factory)

    def impatient_writer(self) -> Writer:
        """A writer for recovery on the read path: it gives up on a busy database soon."""
        return Writer(self.session_factory, short_lock_wait=True)

    def statement_reader(self) -> ReadUnit:
        """A statement reader; without a statement engine, an ordinary reader."""
        if self.statement_factory is None:
            return Reader(self.session_factory)
        return StatementReader(self.statement_factory)


class ReadScope:
    """One request's read transaction, shared by the token lookup and the answer.

    ``restart()`` ends it and opens a fresh one: after a recovery written by a writer,
    the next read must see it (a SQLite reader keeps the snapshot of its first read).
    """

    def __init__(self, uow_factory: UowFactory, documents: DocumentCache | None = None) -> None:
        self._uow_factory = uow_factory
        # The app's recent answers (see read/documents.py); None: every poll builds its own.
        self.documents = documents
        self._reader: ReadUnit | None = None
        self._statements: ReadUnit | None = None

    def statement(self) -> ReadUnit:
        """A reader for single statements (no BEGIN; each statement its own snapshot)."""
        if self._statements is None:
            self._statements = self._uow_factory.statement_reader().__enter__()
        return self._statements

    def reader(self) -> ReadUnit:
        """The open reader (opened on first use)."""
        if self._reader is None:
            reader = self._uow_factory(read_only=True)
            self._reader = reader.__enter__()
        return self._reader

    def restart(self) -> ReadUnit:
        """End the current read transaction and open a new one."""
        self.close()
        return self.reader()

    def close(self) -> None:
        """End the read transaction, if one is open, and give back the statement reader."""
        readers = (self._reader, self._statements)
        self._reader = self._statements = None
        for reader in readers:
            if reader is not None:
                reader.__exit__(None, None, None)

    def __enter__(self) -> ReadScope:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
