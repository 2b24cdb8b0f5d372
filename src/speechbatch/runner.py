"""The in-process runner: sends a claimed job's items to the provider, fenced by attempt.

Per item: a short fenced transaction marks it GENERATING and stamps the job; the
provider call runs with no transaction or connection held; the audio is written
atomically under a key that carries the attempt; a second fenced transaction moves the
item to DONE or ERROR. A fenced write that wins nothing means this run was declared
dead or superseded: it stops at once and writes nothing more.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from sqlalchemy.exc import InterfaceError, OperationalError

from . import metrics
from .config import Settings
from .errors import Fenced
from .providers.base import ProviderError, TTSProvider
from .providers.retry import synthesize_with_retries
from .repositories import Runs
from .storage import LocalStorage
from .uow import SessionUowFactory
from .workers import WorkerIdentity

log = logging.getLogger(__name__)
T = TypeVar("T")
# How long a run waits for an unreachable database before giving up on a write.
DB_RETRY_SECONDS = 60.0

_RUNNERS: weakref.WeakSet[Runner] = weakref.WeakSet()


def audio_key(job_id: int, item_id: int, attempt: int, extension: str) -> str:
    """Where an item's audio of one attempt lives; a later run never reuses the name."""
    return f"jobs/{job_id}/{item_id}-a{attempt}.{extension}"


@dataclass
class _Run:
    job_id: int
    attempt: int
    voice: str = ""
    fenced: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


class Runner:
    """Runs claimed jobs in background threads of this process."""

    def __init__(
        self,
        uow_factory: SessionUowFactory,
        provider: TTSProvider,
        storage: LocalStorage,
        settings: Settings,
    ) -> None:
        self._uow_factory = uow_factory
        self.provider = provider
        self.storage = storage
        self.settings = settings
        self.identity = WorkerIdentity(
            uow_factory, interval_seconds=max(0.2, min(10.0, settings.worker_dead_seconds / 4))
        )
        self._runs: dict[tuple[int, int], _Run] = {}
        self._lock = threading.Lock()
        self._draining = threading.Event()
        _RUNNERS.add(self)

    def _tx(self, work: Callable[[Runs], T]) -> T:
        """Run one short transaction, retrying while the database is unreachable.

        A paid-for result must survive a database restart, so a run waits for the
        database (up to DB_RETRY_SECONDS) rather than dropping the audio. Every write
        here is a compare-and-set, so a retry after a lost commit acknowledgement can
        at worst lose the race, never write twice.
        """
        delay = 0.25
        deadline = time.monotonic() + DB_RETRY_SECONDS
        while True:
            try:
                with self._uow_factory() as uow:
                    result = work(uow.runs)
                    uow.commit()
                    return result
            except (OperationalError, InterfaceError) as exc:
                if time.monotonic() > deadline or self._draining.is_set():
                    raise
                log.warning("database unavailable, retrying in %.1f s: %s", delay, exc.orig)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def worker_id(self) -> int:
        """This process's worker id (registered on first use)."""
        return self.identity.id()

    @property
    def draining(self) -> bool:
        """Whether this process is stopping and starts no new item."""
        return self._draining.is_set()

    def start(self, job_id: int, attempt: int) -> None:
        """Run a job that this process has just claimed at ``attempt``."""
        run = _Run(job_id, attempt)
        with self._lock:
            self._runs[(job_id, attempt)] = run
        threading.Thread(
            target=self._run, args=(run,), name=f"speechbatch-job-{job_id}-a{attempt}", daemon=True
        ).start()

    def live_runs(self) -> list[tuple[int, int]]:
        """(job, attempt) of the runs still going in this process."""
        with self._lock:
            return list(self._runs)

    def _run(self, run: _Run) -> None:
        try:
            run.voice, item_ids = self._tx(lambda repo: repo.runnable_items(run.job_id))
            work: queue.SimpleQueue[int] = queue.SimpleQueue()
            for item_id in item_ids:
                work.put(item_id)
            threads = [
                threading.Thread(
                    target=self._drain_queue,
                    args=(run, work),
                    daemon=True,
                    name=f"speechbatch-job-{run.job_id}-a{run.attempt}-{n}",
                )
                for n in range(min(self.settings.item_concurrency, max(1, len(item_ids))))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if run.fenced.is_set():
                metrics.FENCED.inc()
                log.warning(
                    "run fenced: declared dead or superseded, stopped job=%s attempt=%s",
                    run.job_id, run.attempt,
                )  # fmt: skip
            elif self.draining and not work.empty():
                self._interrupt(run)
            else:
                status = self._tx(lambda repo: repo.finish_run(run.job_id, run.attempt))
                if status is None:
                    metrics.FENCED.inc()
                else:
                    metrics.RUNS.labels(outcome=status).inc()
                log.info("run ended job=%s attempt=%s status=%s", run.job_id, run.attempt, status)
        except Exception as exc:
            log.exception("run crashed job=%s attempt=%s", run.job_id, run.attempt)
            self._end_after_crash(run, exc)
        finally:
            run.done.set()
            with self._lock:
                self._runs.pop((run.job_id, run.attempt), None)

    def _end_after_crash(self, run: _Run, exc: Exception) -> None:
        try:
            self._tx(
                lambda repo: repo.finish_run(
                    run.job_id, run.attempt, run_error=f"run failed: {exc}"
                )
            )
        except Exception:
            # Recovery will find it through the lease or the heartbeat.
            log.exception("could not end crashed run job=%s", run.job_id)

    def _drain_queue(self, run: _Run, work: queue.SimpleQueue[int]) -> None:
        while not run.fenced.is_set() and not self.draining:
            try:
                item_id = work.get_nowait()
            except queue.Empty:
                return
            try:
                self._process_item(run, item_id)
            except Fenced:
                run.fenced.set()

    def _fence(self, run: _Run) -> None:
        """Stamp progress; raise Fenced when this run may no longer write."""
        if run.fenced.is_set():
            raise Fenced()
        if not self._tx(lambda repo: repo.stamp_job_progress(run.job_id, run.attempt)):
            raise Fenced()

    def _process_item(self, run: _Run, item_id: int) -> None:
        started = self._tx(lambda repo: repo.start_item(run.job_id, run.attempt, item_id))
        if started is None:
            # Either fenced or the item is no longer PENDING; the fence tells which.
            self._fence(run)
            return
        first_call = True

        def before_attempt(n: int) -> None:
            # start_item already fenced the first call; later retries fence again.
            nonlocal first_call
            if first_call:
                first_call = False
                return
            self._fence(run)

        try:
            audio = synthesize_with_retries(
                self.provider,
                started.text,
                run.voice,
                max_attempts=self.settings.tts_max_attempts,
                timeout_seconds=self.settings.tts_timeout_seconds,
                before_attempt=before_attempt,
                on_result=lambda status, seconds: metrics.record_provider_call(
                    status, seconds, len(started.text)
                ),
            )
        except ProviderError as exc:
            log.warning(
                "provider failure job=%s attempt=%s item=%s status=%s: %s",
                run.job_id, run.attempt, item_id, exc.status, exc.message,
            )  # fmt: skip
            self._finish(run, item_id, error_message=exc.message)
            return
        key = audio_key(run.job_id, item_id, run.attempt, self.provider.file_extension)
        try:
            self.storage.write(key, audio)
        except OSError as exc:
            self._finish(run, item_id, error_message=f"could not store audio: {exc.strerror}")
            return
        try:
            self._finish(
                run,
                item_id,
                audio_path=key,
                audio_bytes=len(audio),
                audio_sha256=hashlib.sha256(audio).hexdigest(),
            )
        except Fenced:
            self.storage.delete(key)
            raise
        if started.previous_audio_path and started.previous_audio_path != key:
            self.storage.delete(started.previous_audio_path)

    def _finish(
        self,
        run: _Run,
        item_id: int,
        *,
        audio_path: str | None = None,
        audio_bytes: int | None = None,
        audio_sha256: str | None = None,
        error_message: str | None = None,
    ) -> None:
        won = self._tx(
            lambda repo: repo.finish_item(
                run.job_id,
                run.attempt,
                item_id,
                audio_path=audio_path,
                audio_bytes=audio_bytes,
                audio_sha256=audio_sha256,
                error_message=error_message,
            )
        )
        if not won:
            raise Fenced()

    def _interrupt(self, run: _Run) -> None:
        message = (
            "interrupted: the server stopped; Retry resumes without paying again for DONE items"
        )
        won = self._tx(lambda repo: repo.interrupt_run(run.job_id, run.attempt, message))
        if won:
            metrics.RUNS.labels(outcome="INTERRUPTED").inc()
        log.info("run interrupted job=%s attempt=%s won=%s", run.job_id, run.attempt, won)

    def stop_starting_items(self) -> None:
        """Start no new item from now on (safe to call from a signal handler)."""
        self._draining.set()

    def drain(self, timeout: float) -> None:
        """Graceful stop: start no new item, let in-flight calls finish, end runs INTERRUPTED."""
        self._draining.set()
        deadline = time.monotonic() + timeout
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.done.wait(max(0.0, deadline - time.monotonic()))
        for run in runs:
            if not run.done.is_set():
                # Calls still in flight past the grace period: end the run now; when they
                # return, their writes are fenced.
                try:
                    self._interrupt(run)
                except Exception:
                    log.exception("could not interrupt job=%s", run.job_id)
        self.identity.stop()


def stop_starting_items() -> None:
    """Tell every runner of this process to start no new item (SIGTERM arrived)."""
    for runner in list(_RUNNERS):
        runner.stop_starting_items()


def drain_all(timeout: float) -> None:
    """Drain every runner of this process (gunicorn's worker_exit hook, atexit)."""
    for runner in list(_RUNNERS):
        runner.drain(timeout)
