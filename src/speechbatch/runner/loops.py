"""Background loops, each on a thread of its own, and the resume tick they run.

Resume after a deploy: the system claims interrupted jobs itself. Every process's resume
loop calls ``resume_interrupted``: a job whose last run ended INTERRUPTED is claimed with
the same compare-and-set as a click, as a run of kind ``resume`` started by nobody, and
run in this process. A job is resumed at most MAX_RESUMES_WITHOUT_PROGRESS times in a row
without a new DONE item, so a job that cannot progress stops being resumed and waits for
a person. The loop is not the heartbeat thread: a tick slower than WORKER_DEAD_SECONDS
(up to RESUMES_PER_TICK claims on a busy database) never delays a heartbeat.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from speechbatch.adapters import metrics
from speechbatch.adapters.repositories.resume import RESUME
from speechbatch.adapters.uow import UowFactory

log = logging.getLogger(__name__)

MAX_RESUMES_WITHOUT_PROGRESS = 3
# Jobs looked at per tick; the next tick takes the rest.
RESUMES_PER_TICK = 20


class BackgroundLoop:
    """Runs ``tick`` every ``interval_seconds`` on a daemon thread of its own."""

    def __init__(self, name: str, tick: Callable[[], object], interval_seconds: float) -> None:
        self._name = name
        self._tick = tick
        self._interval = interval_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Run no further tick (a tick under way finishes on its own)."""
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._tick()
            except Exception:
                log.exception("background tick failed: %s", self._name)


class RunStarter(Protocol):
    """What resuming needs of the runner."""

    @property
    def draining(self) -> bool: ...
    def worker_id(self) -> int: ...
    def start(self, job_id: int, attempt: int) -> None: ...


def resume_interrupted(uow_factory: UowFactory, runner: RunStarter) -> int:
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
