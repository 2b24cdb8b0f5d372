"""This process's background builders: the exports and renders that a request started
here, and those a worker takes over from the worker tier's queue.

A web process's ``start_export`` or ``start_render`` holds the lock in its own name and
hands the task to ``build_export`` or ``build_render``: a thread of this process builds
it. With the worker tier (SPEECHBATCH_RUNNER=worker) the start holds the lock in the
tier's name (``QUEUED_HOLDER_PREFIX``) and wakes the workers; a worker's
``take_queued_exports`` and ``take_queued_renders`` (takers of ``WorkerTier``) take each
lock over by compare-and-set (``hand_over``: of two workers exactly one wins) and build
it here. Work that no worker takes stops being renewed like work whose builder died, and
the next read fails it once the lease has run out.
"""

from __future__ import annotations

import hashlib
import logging

from speechbatch.adapters.uow import UowFactory
from speechbatch.config import Settings
from speechbatch.runner.export_builder import ExportBuilder
from speechbatch.runner.render_builder import RenderBuilder
from speechbatch.services import exports, renders
from speechbatch.services.ports import ExportTask, RenderTask, Storage

log = logging.getLogger(__name__)

EXPORTS_PER_TAKE = 10
RENDERS_PER_TAKE = 4


class Builders:
    """Starts export and render builders on threads of this process."""

    def __init__(self, uow_factory: UowFactory, storage: Storage, settings: Settings) -> None:
        self.uow_factory = uow_factory
        # What the builders read item audio from and publish to.
        self.storage = storage
        self.settings = settings
        # Tells apart, in a machine's scratch folder, the archives of deployments (or
        # tests) that share it.
        self.deployment = hashlib.sha256(settings.database_url.encode()).hexdigest()[:12]

    def build_export(self, task: ExportTask) -> None:
        """Build the export on a thread of its own, as the holder of its grant."""
        ExportBuilder(self.uow_factory, self.storage, task, self.deployment).start()

    def build_render(self, task: RenderTask) -> None:
        """Build the render on a thread of its own, as the holder of its grant."""
        RenderBuilder(self.uow_factory, self.storage, task).start()

    def take_queued_exports(self) -> int:
        """Take over the exports waiting for a worker and build them here; how many."""
        with self.uow_factory(read_only=True) as uow:
            queued = uow.exports.queued_exports(exports.QUEUED_HOLDER_PREFIX, EXPORTS_PER_TAKE)
        ttl = self.settings.export_lock_ttl_seconds
        taken = 0
        for export in queued:
            holder = self._take_over(export.lock_id, export.holder, ttl, exports.new_holder())
            if holder is None:
                continue
            log.info("worker took export=%s lock=%s", export.export_id, export.lock_id)
            self.build_export(
                ExportTask(
                    export_id=export.export_id,
                    organization_id=export.organization_id,
                    lock_id=export.lock_id,
                    holder=holder,
                    ttl_seconds=ttl,
                )
            )
            taken += 1
        return taken

    def take_queued_renders(self) -> int:
        """Take over the renders waiting for a worker and build them here; how many."""
        with self.uow_factory(read_only=True) as uow:
            queued = uow.renders.queued_renders(renders.QUEUED_HOLDER_PREFIX, RENDERS_PER_TAKE)
        ttl = self.settings.render_lock_ttl_seconds
        taken = 0
        for waiting in queued:
            render = waiting.render
            assert render.lock_id is not None
            holder = self._take_over(render.lock_id, waiting.holder, ttl, renders.new_holder())
            if holder is None:
                continue
            log.info("worker took render=%s job=%s", render.id, render.job_id)
            task = renders.render_task(render, waiting.job_title, waiting.items, holder, ttl)
            self.build_render(task)
            taken += 1
        return taken

    def _take_over(self, lock_id: int, queued: str, ttl: float, holder: str) -> str | None:
        """Hand the lock from the tier's name to ``holder`` (compare-and-set); ``holder``
        when it won, None when another worker took it or its lease ran out."""
        with self.uow_factory() as uow:
            if not uow.locks.hand_over(lock_id, queued, holder, ttl):
                return None
            uow.commit()
        return holder
