"""What the services need of the pieces around them, as Protocols (the app wires the
concrete ones): the runner, the background builders, the audio storage, and the app's
bundle of them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.read import DocumentCache
from speechbatch.adapters.uow import UowFactory
from speechbatch.config import Settings
from speechbatch.domain.renders import RenderOptions
from speechbatch.services.jobs import Limits
from speechbatch.shapes.accounts import VoiceDetail


class RunControl(Protocol):
    """What a claim and a cancel need of the runner: this process's worker id (None when
    runs are left to the worker tier), its provider (for the budget check), starting a run
    and stopping one at once."""

    provider: TTSProvider

    def worker_id(self) -> int | None: ...
    def start(self, job_id: int, attempt: int) -> None: ...
    def cancel(self, job_id: int, attempt: int) -> None: ...


@dataclass(frozen=True)
class ExportTask:
    """What an export's builder needs: the export, and the grant that fences its writes."""

    export_id: int
    organization_id: int
    lock_id: int
    holder: str
    ttl_seconds: float


@dataclass(frozen=True)
class RenderTask:
    """What a render's builder needs: the render, its job, and the grant that fences its
    writes."""

    render_id: int
    organization_id: int
    job_id: int
    job_title: str
    items: int
    lock_id: int
    holder: str
    ttl_seconds: float
    options: RenderOptions


class Builders(Protocol):
    """What starting an export or a render needs of the background builders
    (``runner/builders.py``): build it on a thread of this process, as the holder of the
    task's grant."""

    def build_export(self, task: ExportTask) -> None: ...
    def build_render(self, task: RenderTask) -> None: ...


class Storage(Protocol):
    """Where audio, exports and renders live (a folder or a bucket): whole-or-absent
    writes, streamed reads, deletes and the listing of gc. Every failure of the store
    is an OSError; a missing key is a FileNotFoundError."""

    def write(self, key: str, data: bytes) -> None: ...
    def write_file(self, key: str, source: Path) -> None: ...
    def open(self, key: str) -> BinaryIO: ...
    def exists(self, key: str) -> bool: ...
    def delete(self, key: str) -> None: ...
    def keys_older_than(self, seconds: float) -> Iterator[str]: ...
    def abort_uploads_older_than(self, seconds: float) -> list[str]: ...
    def download_url(self, key: str, content_type: str, filename: str) -> str | None: ...


class Nudge(Protocol):
    """Background work that a request can ask to run now."""

    def nudge(self) -> None: ...


class AppServices(Protocol):
    """What request handlers and CLI commands are given, built once per app."""

    settings: Settings
    uow_factory: UowFactory
    provider: TTSProvider
    storage: Storage
    # What a click's claim and a cancel go through: this process's runner, or (with
    # SPEECHBATCH_RUNNER=worker) the hand-off that leaves runs to the worker tier.
    run_control: RunControl
    # Where a start (not queued for the worker tier) hands its export or render.
    builders: Builders
    documents: DocumentCache
    # Writes the stale marks after a lexicon change (a PUT nudges it); None: the
    # background tick alone does.
    stale_passes: Nudge | None
    # Counts the lexicon's dry runs (a POST of one nudges it); None: the tick alone does.
    impact_passes: Nudge | None

    @property
    def limits(self) -> Limits: ...

    def voice_details(self) -> list[VoiceDetail]: ...
