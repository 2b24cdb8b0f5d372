"""Unit of work: owns one session and its transaction; rolls back unless committed."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from .repository import Repository


class UnitOfWork:
    """A short transaction: ``with uow_factory() as uow: ...; uow.commit()``."""

    repo: Repository
    session: Session

    def __init__(self, session_factory: sessionmaker[Any]) -> None:
        self._session_factory = session_factory

    def __enter__(self) -> UnitOfWork:
        self.session = self._session_factory()
        self.repo = Repository(self.session)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.session.rollback()
        finally:
            self.session.close()

    def commit(self) -> None:
        """Commit what this unit of work did."""
        self.session.commit()

    def rollback(self) -> None:
        """Throw away what this unit of work did."""
        self.session.rollback()


UowFactory = Callable[[], UnitOfWork]
