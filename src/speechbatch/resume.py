"""Resume after a deploy: the system claims interrupted jobs itself (a service).

Every process's background tick (its heartbeat thread) calls ``resume_interrupted``: a
job whose last run ended INTERRUPTED is claimed with the same compare-and-set as a click,
as a run of kind ``resume`` started by nobody, and run in this process. A job is resumed
at most MAX_RESUMES_WITHOUT_PROGRESS times in a row without a new DONE item, so a job that
cannot progress stops being resumed and waits for a person.
"""

from __future__ import annotations

import logging

from . import metrics
from .repositories.resume import RESUME
from .runner import Runner
from .uow import UowFactory

log = logging.getLogger(__name__)

MAX_RESUMES_WITHOUT_PROGRESS = 3
# Jobs looked at per tick; the next tick takes the rest.
RESUMES_PER_TICK = 20


def resume_interrupted(uow_factory: UowFactory, runner: Runner) -> int:
    """Claim and start the interrupted jobs this process may resume; how many it started."""
    if runner.draining:
        return 0
    with uow_factory(read_only=True) as uow:
        candidates = uow.resume.find_resumable_jobs(
            max_streak=MAX_RESUMES_WITHOUT_PROGRESS, limit=RESUMES_PER_TICK
        )
    started = 0
    for job in candidates:
        if runner.draining:
            break
        worker_id = runner.worker_id()
        with uow_factory() as uow:
            attempt = uow.jobs.claim_job(
                job.job_id,
                job.organization_id,
                regenerate=False,
                user_id=None,
                worker_id=worker_id,
                kind=RESUME,
                expected_attempt=job.attempt,
            )
            if attempt is None:
                continue  # a click or another process claimed it first
            uow.commit()
        metrics.CLAIMS.labels(result="resumed").inc()
        log.info("resumed interrupted job=%s attempt=%s", job.job_id, attempt)
        runner.start(job.job_id, attempt)
        started += 1
    return started
