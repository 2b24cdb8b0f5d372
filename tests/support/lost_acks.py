"""Faults injected in-process at the end of background work: commits whose acknowledgement
is lost, and a store that fails right after an upload landed.

``LostAcks`` is the app's unit-of-work factory, except that its writers fail the commit
of chosen transactions with DatabaseUnavailable, as a connection that drops at that moment
does: after the COMMIT reached the server (``reached=True``: the transaction happened,
the caller cannot know it) or before (it did not).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from speechbatch.adapters.uow import Reader, SessionUowFactory, Writer
from speechbatch.errors import DatabaseUnavailable
from speechbatch.services.ports import Storage
from tests.support.storages import StorageProxy

EVERY_COMMIT = "*"


class LostAcks(SessionUowFactory):
    """Units of ``inner``'s database whose writers that called ``method`` (``"repository.
    method"``, or EVERY_COMMIT) fail their next ``times`` commits."""

    def __init__(
        self, inner: SessionUowFactory, method: str, *, times: int = 1, reached: bool = True
    ) -> None:
        super().__init__(inner.session_factory, inner.statement_factory)
        self.method = method
        self.reached = reached
        self._left = times
        self._lock = threading.Lock()
        self.failed = 0  # commits failed so far

    def __call__(self, *, read_only: bool = False) -> Any:  # a Reader, or a faulty Writer
        if read_only:
            return Reader(self.session_factory)
        return _FaultyWriter(self)

    def take(self) -> bool:
        """Whether this commit is one to fail (counted)."""
        with self._lock:
            if self._left <= 0:
                return False
            self._left -= 1
            self.failed += 1
            return True


class _FaultyWriter(Writer):
    def __init__(self, faults: LostAcks) -> None:
        super().__init__(faults.session_factory)
        self._faults = faults
        self._targeted = faults.method == EVERY_COMMIT

    def __enter__(self) -> _FaultyWriter:
        super().__enter__()
        if not self._targeted:
            repository_name, method_name = self._faults.method.split(".")
            repository = getattr(self, repository_name)
            method = getattr(repository, method_name)

            def recorded(*args: Any, **kwargs: Any) -> Any:
                self._targeted = True
                return method(*args, **kwargs)

            setattr(repository, method_name, recorded)  # this unit's own repository
        return self

    def commit(self) -> None:
        if not (self._targeted and self._faults.take()):
            super().commit()
            return
        if self._faults.reached:
            super().commit()
            raise DatabaseUnavailable("injected: the connection dropped after the COMMIT")
        self.rollback()
        raise DatabaseUnavailable("injected: the connection dropped before the COMMIT")


class FailsAfterUpload(StorageProxy):
    """A store whose ``nth`` upload (1-based) lands, then fails as a connection reset
    before its answer would: the object is there, the caller is told it is not."""

    def __init__(self, inner: Storage, nth: int) -> None:
        super().__init__(inner)
        self._nth = nth
        self._uploads = 0

    def write_file(self, key: str, source: Path) -> None:
        self.inner.write_file(key, source)
        self._uploads += 1
        if self._uploads == self._nth:
            raise OSError(104, f"injected: connection reset after the upload of {key!r}")
