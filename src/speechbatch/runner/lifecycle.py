"""The runs of this process: their threads, their beat, their end, cancel, and a
graceful stop.

A claimed run gets a thread that reads its plan, groups its items by fingerprint (items
that ask the provider the same thing are sent once, their duplicates share the audio)
and, for each provider its lines are spoken by, lets up to ITEM_CONCURRENCY threads
(lanes) take that provider's groups from a queue (``plan.py``). Each item goes
through ``item.py``'s pipeline. When every lane is done the run ends in one fenced
transaction; a graceful stop (SIGTERM) starts no new item, lets the calls in flight
finish and ends the run INTERRUPTED.

A run is GENERATING only while a live process runs it: the heartbeat stamps the beat of
the runs in ``live_runs()`` and of no other. A lane that fails (not fenced) makes the run
start nothing more and end with the reason: INTERRUPTED when the database stayed away
longer than DB_RETRY_SECONDS (the resume loop sends the rest), FAILED otherwise. A run
whose end cannot be written leaves ``live_runs()`` all the same: its beat stops, and the
next read recovers it within WORKER_DEAD_SECONDS, as a dead process's run.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol, TypeVar

from speechbatch.adapters import metrics
from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.repositories.slots import SlotRepository
from speechbatch.adapters.uow import RunUowFactory
from speechbatch.config import Settings
from speechbatch.errors import DatabaseUnavailable
from speechbatch.runner.attempt import Outcome, Run
from speechbatch.runner.finish import reuse_duplicate
from speechbatch.runner.gate import provider_gates
from speechbatch.runner.heartbeat import WorkerIdentity
from speechbatch.runner.item import run_item
from speechbatch.runner.lexicon import fail_unspeakable
from speechbatch.runner.loops import BackgroundLoop
from speechbatch.runner.plan import Group, lanes, next_group, read_plan, take_plan, work_of
from speechbatch.runner.steps import Steps
from speechbatch.runner.transactions import Transactions
from speechbatch.services.ports import Storage

log = logging.getLogger(__name__)
T = TypeVar("T")

_RUNNERS: weakref.WeakSet[Runner] = weakref.WeakSet()
INTERRUPTED_BY_STOP = (
    "interrupted: the server stopped; Retry resumes without paying again for DONE items"
)


def _interrupt(tx: Transactions, run: Run, message: str) -> None:
    """End ``run`` INTERRUPTED (Retry resumes it) with ``message``, if it is still its job's."""
    won = tx(lambda uow: uow.runs.interrupt_run(run.job_id, run.attempt, message))
    if won:
        metrics.RUNS.labels(outcome="INTERRUPTED").inc()
    log.info("run interrupted job=%s attempt=%s won=%s", run.job_id, run.attempt, won)


def _log_fenced(run: Run) -> None:
    """The run learned, at its end or before, that it may no longer write."""
    metrics.FENCED.inc()
    log.warning(
        "run fenced: declared dead or superseded, stopped job=%s attempt=%s",
        run.job_id, run.attempt,
    )  # fmt: skip


class Background(Protocol):
    """Work on threads of its own, started with the process and stopped at its drain."""

    def start(self) -> None: ...
    def stop(self) -> None: ...


class Runner:
    """Runs claimed jobs in background threads of this process."""

    def __init__(
        self,
        uow_factory: RunUowFactory,
        provider: TTSProvider,
        storage: Storage,
        settings: Settings,
        listen_dsn: str | None = None,
    ) -> None:
        self._uow_factory = uow_factory
        self.storage = storage
        self.settings = settings
        self.identity = WorkerIdentity(
            uow_factory,
            interval_seconds=max(0.2, min(10.0, settings.worker_dead_seconds / 4)),
            running=self.live_runs,
        )
        self._runs: dict[tuple[int, int], Run] = {}
        self._lock = threading.Lock()
        self._draining = threading.Event()
        self.tx = Transactions(uow_factory, self._draining.is_set, settings.db_retry_seconds)
        self.gate, gates = provider_gates(
            provider, self._slot_tx, settings, self.worker_id, listen_dsn
        )
        self.steps = Steps(
            self.tx, self.gate, provider, storage, settings, self._draining.is_set, gates
        )
        # What the background loop runs once started (set by the app): the resume tick.
        self.background_tick: Callable[[], object] | None = None
        self._loops: list[Background] = []
        self.background_work: list[Background] = []  # started with it: webhook senders
        _RUNNERS.add(self)

    @property
    def provider(self) -> TTSProvider:
        """The provider this process's runs call."""
        return self.steps.provider

    @provider.setter
    def provider(self, provider: TTSProvider) -> None:
        self.steps.provider = provider

    def _slot_tx(self, work: Callable[[SlotRepository], T]) -> T:
        return self.tx(lambda uow: work(uow.slots))

    def start_background(self, tick: Callable[[], object] | None = None) -> None:
        """Register this process (its heartbeat starts) and run ``tick`` on a thread of its
        own every heartbeat interval: a process that is up resumes interrupted jobs within
        WORKER_DEAD_SECONDS, and a slow tick never delays the heartbeat."""
        self.worker_id()
        if tick is not None and not any(isinstance(w, BackgroundLoop) for w in self._loops):
            paying = functools.partial(_pay_owed_then, self.tx, tick)
            loop = BackgroundLoop("speechbatch-resume", paying, self.identity.interval_seconds)
            self._loops.append(loop)
            loop.start()
        for work in [w for w in self.background_work if w not in self._loops]:
            self._loops.append(work)
            work.start()

    def worker_id(self) -> int:
        """This process's worker id (registered on first use)."""
        return self.identity.id()

    @property
    def draining(self) -> bool:
        """Whether this process is stopping and starts no new item."""
        return self._draining.is_set()

    def start(self, job_id: int, attempt: int) -> None:
        """Run a job that this process has just claimed at ``attempt``."""
        run = Run(job_id, attempt)
        with self._lock:
            self._runs[(job_id, attempt)] = run
        threading.Thread(
            target=self._run, args=(run,), name=f"speechbatch-job-{job_id}-a{attempt}", daemon=True
        ).start()

    def live_runs(self) -> list[tuple[int, int]]:
        """(job, attempt) of the runs this process is running: the ones it beats for."""
        with self._lock:
            return list(self._runs)

    def cancel(self, job_id: int, attempt: int) -> None:
        """A run of this process was cancelled: its threads start nothing more, at once.

        The database already fences it; this only spares the in-flight threads the
        round trip that would tell them (no call leaves after the cancel's answer).
        """
        with self._lock:
            run = self._runs.get((job_id, attempt))
        if run is not None:
            run.fenced.set()

    def _stopping(self, run: Run) -> bool:
        return self.steps.stop_reason(run) is not None

    def _run(self, run: Run) -> None:
        try:
            # Registered before any item: an item's start takes its slot as this worker.
            self.worker_id()
            plan, run.lexicon = self.tx(lambda uow: read_plan(uow, run, self.provider.max_chars))
            take_plan(run, plan, self.provider)
            by_provider = work_of(self.steps, run, plan.items)
            threads = [
                threading.Thread(
                    target=self._take_groups,
                    args=(run, queues),
                    daemon=True,
                    name=f"speechbatch-job-{run.job_id}-a{run.attempt}-{queues[0][0]}-{n}",
                )
                for n, queues in enumerate(lanes(by_provider, self.settings.item_concurrency))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self._end(run, left=run.left_items or any(not p.work.empty() for p in by_provider))
        except Exception as exc:
            log.exception("run crashed job=%s attempt=%s", run.job_id, run.attempt)
            run.failure = run.failure or exc
            self._end_failed(run)
        finally:
            self.steps.shares_changed()  # this run wants no more slots
            run.done.set()
            with self._lock:
                self._runs.pop((run.job_id, run.attempt), None)

    def _end(self, run: Run, *, left: bool) -> None:
        """End the run: fenced (nothing to write), failed (a lane's reason), interrupted
        (draining with items left), or its outcome from the items."""
        if run.fenced.is_set():
            _log_fenced(run)
            return
        if run.failure is not None:
            self._end_failed(run)
            return
        if self.draining and left:
            _interrupt(self.tx, run, INTERRUPTED_BY_STOP)
            return
        status = self.tx(
            lambda uow: uow.runs.finish_run(run.job_id, run.attempt, over_budget=run.over_budget)
        )
        if status is None:
            _log_fenced(run)
            return
        metrics.RUNS.labels(outcome=status).inc()
        log.info("run ended job=%s attempt=%s status=%s", run.job_id, run.attempt, status)

    def _end_failed(self, run: Run) -> None:
        """End a run a lane gave up with its reason: INTERRUPTED (to be resumed) when the
        database was away too long, FAILED otherwise. When even that cannot be written,
        the run leaves this process's beat and is recovered within WORKER_DEAD_SECONDS."""
        failure = run.failure
        try:
            if isinstance(failure, DatabaseUnavailable):
                seconds = self.settings.db_retry_seconds
                _interrupt(self.tx, run, f"interrupted: the database was unreachable for over "
                                     f"{seconds:g} s; Retry resumes without paying again for "
                                     "DONE items")  # fmt: skip
                return
            status = self.tx(lambda uow: uow.runs.finish_run(
                run.job_id, run.attempt, run_error=f"run failed: {failure}"))  # fmt: skip
            if status is None:
                _log_fenced(run)
            else:
                metrics.RUNS.labels(outcome="FAILED").inc()
        except Exception:
            log.exception("could not end a failed run job=%s: recovery will", run.job_id)

    def _take_groups(self, run: Run, queues: list[tuple[str, queue.SimpleQueue[Group]]]) -> None:
        """One lane: take groups (from its own provider's queue first, then the others')
        until there are none or the run stops. A failure that is not a fence stops the
        run's starts (the run ends with it, see ``_end``)."""
        try:
            while not self._stopping(run):
                group = next_group(queues)
                if group is None:
                    break
                self._process_group(run, group)
        except Exception as exc:
            log.exception("lane failed job=%s attempt=%s", run.job_id, run.attempt)
            if run.failure is None:
                run.failure = exc
        finally:
            self.steps.lane_ended(run.job_id)

    def _process_group(self, run: Run, group: Group) -> None:
        """Send the group's first item; its duplicates then share that audio.

        When the first fails, the next one is sent (each is a call of its own); a
        duplicate never waits on another thread, since one thread owns the group.
        """
        source: int | None = None
        for item_id, spoken in group.items:
            if self._stopping(run):
                run.left_items = True
                return
            if group.error is not None:
                if not fail_unspeakable(self.steps, run, item_id, group.error):
                    return
                continue
            if source is None:
                outcome = run_item(
                    self.steps, run, item_id, spoken, group.fingerprint, group.voice
                ).outcome
                if outcome in (Outcome.SENT, Outcome.REUSED):
                    source = item_id
            else:
                outcome = reuse_duplicate(
                    self.steps, run, item_id, source, group.fingerprint, spoken
                )
            if outcome is Outcome.FENCED:
                run.fenced.set()
                return

    def stop_starting_items(self) -> None:
        """Start no new item from now on (safe to call from a signal handler)."""
        self._draining.set()

    def drain(self, timeout: float) -> None:
        """Graceful stop: start no new item, let in-flight calls finish, end runs INTERRUPTED."""
        self._draining.set()
        deadline = time.monotonic() + timeout  # the webhook senders' stop waits within it
        for loop in self._loops:
            loop.stop()
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.done.wait(max(0.0, deadline - time.monotonic()))
        for run in runs:
            if not run.done.is_set():
                # Calls still in flight past the grace period: end the run now; when they
                # return, their writes are fenced.
                try:
                    _interrupt(self.tx, run, INTERRUPTED_BY_STOP)
                except Exception:
                    log.exception("could not interrupt job=%s", run.job_id)
        for gate in self.steps.all_gates():
            gate.close()
        self.identity.stop()


def stop_starting_items() -> None:
    """Tell every runner of this process to start no new item (SIGTERM arrived)."""
    for runner in list(_RUNNERS):
        runner.stop_starting_items()


def _pay_owed_then(tx: Transactions, tick: Callable[[], object]) -> None:
    """One background tick: first the give-backs the database refused while it was away."""
    tx.pay_owed()
    tick()


def start_background_all() -> None:
    """Start every runner's background loop in this process (gunicorn's post_worker_init).

    Not with SPEECHBATCH_RUNNER=worker: web processes then run nothing, not even the
    resume tick (the worker tier's ``WorkerTier.serve`` starts its own runner's)."""
    for runner in list(_RUNNERS):
        if not runner.settings.runs_in_workers:
            runner.start_background(runner.background_tick)


def drain_all(timeout: float) -> None:
    """Drain every runner of this process (gunicorn's worker_exit hook, atexit)."""
    for runner in list(_RUNNERS):
        runner.drain(timeout)
