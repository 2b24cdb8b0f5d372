"""Exports built by the worker tier (SPEECHBATCH_RUNNER=worker).

``start_export`` in a web process holds the export's lock in the tier's name
(``QUEUED_HOLDER_PREFIX``) and wakes the workers; a worker takes the lock over by
compare-and-set (``hand_over``: of two workers exactly one wins) and builds the archive
as a web process would. An export that no worker takes stops being renewed like one
whose builder died, and the next read fails it once the lease has run out.
"""

from __future__ import annotations

import logging

from speechbatch.adapters.uow import UowFactory
from speechbatch.config import Settings
from speechbatch.services.exports import (
    QUEUED_HOLDER_PREFIX,
    ExportBuilder,
    ExportTask,
    new_holder,
)
from speechbatch.services.ports import Storage

log = logging.getLogger(__name__)

EXPORTS_PER_TAKE = 10


def take_queued_exports(uow_factory: UowFactory, storage: Storage, settings: Settings) -> int:
    """Take over the exports waiting for a worker and build them here; how many."""
    with uow_factory(read_only=True) as uow:
        queued = uow.exports.queued_exports(QUEUED_HOLDER_PREFIX, EXPORTS_PER_TAKE)
    ttl = settings.export_lock_ttl_seconds
    taken = 0
    for export in queued:
        holder = new_holder()
        with uow_factory() as uow:
            if not uow.locks.hand_over(export.lock_id, export.holder, holder, ttl):
                continue  # another worker took it, or its lease ran out
            uow.commit()
        log.info("worker took export=%s lock=%s", export.export_id, export.lock_id)
        task = ExportTask(
            export_id=export.export_id,
            organization_id=export.organization_id,
            lock_id=export.lock_id,
            holder=holder,
            ttl_seconds=ttl,
        )
        ExportBuilder(uow_factory, storage, task).start()
        taken += 1
    return taken
