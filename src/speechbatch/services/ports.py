"""What the services need of the pieces around them, as Protocols (the app wires the
concrete ones): the runner, the audio storage, and the app's bundle of both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.read import DocumentCache
from speechbatch.adapters.uow import UowFactory
from speechbatch.config import Settings
from speechbatch.services.jobs import Limits


class RunControl(Protocol):
    """What a claim and a cancel need of the runner: this process's worker id, its
    provider (for the budget check), starting a run and stopping one at once."""

    provider: TTSProvider

    def worker_id(self) -> int: ...
    def start(self, job_id: int, attempt: int) -> None: ...
    def cancel(self, job_id: int, attempt: int) -> None: ...


class Storage(Protocol):
    """Where audio lives: whole writes, reads, deletes and the listing of gc."""

    def path(self, key: str) -> Path: ...
    def write(self, key: str, data: bytes) -> None: ...
    def write_file(self, key: str, source: Path) -> None: ...
    def open(self, key: str) -> BinaryIO: ...
    def exists(self, key: str) -> bool: ...
    def delete(self, key: str) -> None: ...
    def keys_older_than(self, seconds: float) -> Iterator[str]: ...


class AppServices(Protocol):
    """What request handlers and CLI commands are given, built once per app."""

    settings: Settings
    uow_factory: UowFactory
    provider: TTSProvider
    storage: Storage
    runner: RunControl
    documents: DocumentCache

    @property
    def limits(self) -> Limits: ...
