"""Unit of work: owns one session and its transaction; rolls back unless committed."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from .db import READ_ONLY
from .repositories.sign_ins import SignInRepository
from .repositories.tokens import TokenRepository
from .repository import Repository


class UnitOfWork:
    """A short transaction: ``with uow_factory() as uow: ...; uow.commit()``."""

    repo: Repository
    tokens: TokenRepository
    sign_ins: SignInRepository
    session: Session

    def __init__(self, session_factory: sessionmaker[Any], *, read_only: bool = False) -> None:
        self._session_factory = session_factory
        self._read_only = read_only

    def __enter__(self) -> UnitOfWork:
        self.session = self._session_factory()
        if self._read_only:
            options: dict[str, Any] = {READ_ONLY: True}
            self.session.connection(execution_options=options)
        self.repo = Repository(self.session)
        self.tokens = TokenRepository(self.session)
        self.sign_ins = SignInRepository(self.session)
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


# Called as uow_factory() or uow_factory(read_only=True).
UowFactory = Callable[..., UnitOfWork]
