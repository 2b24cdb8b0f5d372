"""Lease-expiry recovery on the read path: dead runs end FAILED, orphan items ERROR."""

from __future__ import annotations

import logging

from speechbatch.adapters import metrics
from speechbatch.adapters.repositories.recovery import StaleJob
from speechbatch.adapters.uow import UowFactory
from speechbatch.config import Settings
from speechbatch.errors import DatabaseUnavailable

log = logging.getLogger(__name__)


def recover_stale(
    uow_factory: UowFactory,
    settings: Settings,
    *,
    organization_id: int | None = None,
    job_id: int | None = None,
) -> int:
    """Lease-expiry recovery: end dead runs and fix orphan items; return how many jobs.

    Each job is recovered in its own short transaction, by a writer that waits for a busy
    row (or a busy SQLite) no longer than ``lock_timeout``: a row that another process
    holds, even one frozen inside its transaction, is left for a later read, and the read
    answers the state as it is. A read never fails, nor hangs, because of recovery.
    """
    try:
        with uow_factory(read_only=True) as uow:
            stale = uow.recovery.find_stale_jobs(
                lease_seconds=settings.lease_seconds,
                worker_dead_seconds=settings.worker_dead_seconds,
                organization_id=organization_id,
                job_id=job_id,
            )
            orphans = uow.recovery.find_orphan_item_jobs(
                organization_id=organization_id, job_id=job_id
            )
    except DatabaseUnavailable:
        log.warning("recovery check skipped: database busy", exc_info=True)
        return 0
    recovered = sum(_recover_job(uow_factory, settings, job) for job in stale)
    for orphan_job_id in orphans:
        _recover_orphans(uow_factory, orphan_job_id)
    return recovered


def recover_all(uow_factory: UowFactory, settings: Settings) -> int:
    """Sweep every organization's dead jobs now; return how many were recovered."""
    return recover_stale(uow_factory, settings)


def _dead_run_message(job: StaleJob, settings: Settings) -> str:
    if job.reason == "lease":
        why = f"no progress for over {settings.lease_seconds:g} s"
    elif job.reason == "unassigned":
        why = f"no worker took it within {settings.worker_dead_seconds:g} s"
    else:
        why = f"worker {job.worker} stopped heartbeating for this run (it died, or gave it up)"
    return f"auto-recovered: {why}; Retry resumes without paying again for DONE items"


def _recover_job(uow_factory: UowFactory, settings: Settings, job: StaleJob) -> bool:
    """End one dead run (compare-and-set); whether this call won."""
    try:
        with uow_factory.impatient_writer() as uow:
            won = uow.recovery.recover_stale_job(
                job,
                lease_seconds=settings.lease_seconds,
                worker_dead_seconds=settings.worker_dead_seconds,
                message=_dead_run_message(job, settings),
            )
            uow.commit()
    except DatabaseUnavailable:
        log.warning("recovery of job %s skipped: row busy", job.job_id, exc_info=True)
        return False
    if not won:
        log.info("recovery lost the race job=%s attempt=%s", job.job_id, job.attempt)
        return False
    metrics.RECOVERIES.labels(reason=job.reason).inc()
    metrics.RUNS.labels(outcome="RECOVERED").inc()
    log.warning(
        "job recovered job=%s attempt=%s reason=%s worker=%s",
        job.job_id, job.attempt, job.reason, job.worker,
    )  # fmt: skip
    return True


def _recover_orphans(uow_factory: UowFactory, job_id: int) -> None:
    """Items left GENERATING after their job's run ended go to ERROR."""
    try:
        with uow_factory.impatient_writer() as uow:
            uow.recovery.recover_orphan_items(
                job_id, "auto-recovered: left GENERATING after its run ended"
            )
            uow.commit()
    except DatabaseUnavailable:
        log.warning("orphan items of job %s skipped: row busy", job_id)
