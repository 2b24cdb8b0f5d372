"""The runs of this process: their threads, their end, cancel, and a graceful stop.

A claimed run gets a thread that reads its plan, groups its items by fingerprint (items
that ask the provider the same thing are sent once, their duplicates share the audio)
and lets up to ITEM_CONCURRENCY threads take groups from a queue. Each item goes
through ``item.py`` (start, finish) and ``call.py`` (the call). When every thread is
done the run ends in one fenced transaction; a graceful stop (SIGTERM) starts no new
item, lets the calls in flight finish and ends the run INTERRUPTED.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from speechbatch.adapters import metrics
from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.repositories.runs import RunPlan
from speechbatch.adapters.repositories.slots import SlotRepository
from speechbatch.adapters.uow import RunUnit, RunUowFactory
from speechbatch.config import Settings
from speechbatch.domain.editing import parse_options, spoken_text
from speechbatch.domain.fingerprints import fingerprinter
from speechbatch.domain.lexicon import Lexicon, LexiconTimeout
from speechbatch.errors import Fenced
from speechbatch.runner.call import Calls
from speechbatch.runner.gate import ProviderGate
from speechbatch.runner.heartbeat import WorkerIdentity
from speechbatch.runner.item import Items, Run
from speechbatch.runner.lexicon import fail_unspeakable
from speechbatch.runner.loops import BackgroundLoop
from speechbatch.runner.transactions import Transactions
from speechbatch.services.lexicon import compiled_lexicon
from speechbatch.services.ports import Storage

log = logging.getLogger(__name__)
T = TypeVar("T")

_RUNNERS: weakref.WeakSet[Runner] = weakref.WeakSet()


@dataclass
class _Group:
    """Items of one run that ask the provider the same thing: sent once, then shared."""

    fingerprint: str
    # (item id, spoken text): computed once, here; the start sends and bills it.
    items: list[tuple[int, str]]
    # An item a rule runs out of time on: it ends ERROR with this message, unsent.
    error: str | None = None


def _plan(uow: RunUnit, run: Run) -> tuple[RunPlan, Lexicon]:
    """The run's plan and its organization's rules, read once in one transaction (the
    rules are cached per version: no statement per item for them)."""
    plan = uow.runs.run_plan(run.job_id, run.attempt)
    return plan, compiled_lexicon(uow.lexicon, plan.organization_id)


def _groups(provider: TTSProvider, run: Run, items: list[tuple[int, str]]) -> list[_Group]:
    """The run's items grouped by fingerprint (of their spoken text, with the rules the
    run began with), in the order of each group's first item; an item a rule runs out
    of time on is a group of its own, first, to be ended ERROR."""
    fingerprint = fingerprinter(provider)
    groups: dict[str, _Group] = {}
    unspeakable: list[_Group] = []
    for item_id, text in items:
        try:
            spoken = spoken_text(text, run.lexicon)
        except LexiconTimeout as exc:
            unspeakable.append(_Group("", [(item_id, text)], error=str(exc)))
            continue
        fp = fingerprint(run.organization_id, run.voice, spoken, run.options)
        groups.setdefault(fp, _Group(fp, [])).items.append((item_id, spoken))
    return unspeakable + list(groups.values())


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
            uow_factory, interval_seconds=max(0.2, min(10.0, settings.worker_dead_seconds / 4))
        )
        self._runs: dict[tuple[int, int], Run] = {}
        self._lock = threading.Lock()
        self._draining = threading.Event()
        self.tx = Transactions(uow_factory, self._draining.is_set)
        self.gate = ProviderGate(self._slot_tx, settings, self.worker_id, listen_dsn)
        self.items = Items(self.tx, self.gate, provider, storage, settings, self._draining.is_set)
        self.calls = Calls(self.items)
        # What the background loop runs once started (set by the app): the resume tick.
        self.background_tick: Callable[[], object] | None = None
        self._loops: list[Background] = []
        self.background_work: list[Background] = []  # started with it: webhook senders
        _RUNNERS.add(self)

    @property
    def provider(self) -> TTSProvider:
        """The provider this process's runs call."""
        return self.items.provider

    @provider.setter
    def provider(self, provider: TTSProvider) -> None:
        self.items.provider = provider

    def _slot_tx(self, work: Callable[[SlotRepository], T]) -> T:
        return self.tx(lambda uow: work(uow.slots))

    def start_background(self, tick: Callable[[], object] | None = None) -> None:
        """Register this process (its heartbeat starts) and run ``tick`` on a thread of its
        own every heartbeat interval: a process that is up resumes interrupted jobs within
        WORKER_DEAD_SECONDS, and a slow tick never delays the heartbeat."""
        self.worker_id()
        if tick is not None and not any(isinstance(w, BackgroundLoop) for w in self._loops):
            loop = BackgroundLoop("speechbatch-resume", tick, self.identity.interval_seconds)
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
        """(job, attempt) of the runs still going in this process."""
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
        return run.fenced.is_set() or self.draining or run.over_budget is not None

    def _run(self, run: Run) -> None:
        try:
            # Registered before any item: an item's start takes its slot as this worker.
            self.worker_id()
            plan, run.lexicon = self.tx(lambda uow: _plan(uow, run))
            run.voice, run.organization_id = plan.voice, plan.organization_id
            run.regenerate, run.options = plan.regenerate, parse_options(plan.options)
            work: queue.SimpleQueue[_Group] = queue.SimpleQueue()
            groups = _groups(self.provider, run, plan.items)
            for group in groups:
                work.put(group)
            threads = [
                threading.Thread(
                    target=self._take_groups,
                    args=(run, work),
                    daemon=True,
                    name=f"speechbatch-job-{run.job_id}-a{run.attempt}-{n}",
                )
                for n in range(min(self.settings.item_concurrency, max(1, len(groups))))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self._end(run, left=run.left_items or not work.empty())
        except Exception as exc:
            log.exception("run crashed job=%s attempt=%s", run.job_id, run.attempt)
            self._end_after_crash(run, exc)
        finally:
            self.gate.share_changed()  # this run wants no more slots
            run.done.set()
            with self._lock:
                self._runs.pop((run.job_id, run.attempt), None)

    def _end(self, run: Run, *, left: bool) -> None:
        """End the run: fenced (nothing to write), interrupted (draining with items
        left), or its outcome from the items."""
        if run.fenced.is_set():
            metrics.FENCED.inc()
            log.warning(
                "run fenced: declared dead or superseded, stopped job=%s attempt=%s",
                run.job_id, run.attempt,
            )  # fmt: skip
            return
        if self.draining and left:
            self._interrupt(run)
            return
        status = self.tx(
            lambda uow: uow.runs.finish_run(run.job_id, run.attempt, over_budget=run.over_budget)
        )
        if status is None:
            metrics.FENCED.inc()
        else:
            metrics.RUNS.labels(outcome=status).inc()
        log.info("run ended job=%s attempt=%s status=%s", run.job_id, run.attempt, status)

    def _end_after_crash(self, run: Run, exc: Exception) -> None:
        try:
            self.tx(
                lambda uow: uow.runs.finish_run(
                    run.job_id, run.attempt, run_error=f"run failed: {exc}"
                )
            )
        except Exception:
            # Recovery will find it through the lease or the heartbeat.
            log.exception("could not end crashed run job=%s", run.job_id)

    def _take_groups(self, run: Run, work: queue.SimpleQueue[_Group]) -> None:
        while not self._stopping(run):
            try:
                group = work.get_nowait()
            except queue.Empty:
                break
            try:
                self._process_group(run, group)
            except Fenced:
                run.fenced.set()
            except Exception:
                # The database stayed away longer than DB_RETRY_SECONDS: the item is left
                # GENERATING and recovery finds it, as for a process that died here.
                log.exception("item failed job=%s attempt=%s", run.job_id, run.attempt)
                run.fenced.set()
        self.gate.lane_ended(run.job_id)

    def _process_group(self, run: Run, group: _Group) -> None:
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
                fail_unspeakable(self.items, run, item_id, group.error)
                continue
            if source is None:
                if self._process_item(run, item_id, spoken, group.fingerprint):
                    source = item_id
                continue
            self.items.reuse_duplicate(run, item_id, source, group.fingerprint, spoken)

    def _process_item(self, run: Run, item_id: int, spoken: str, fingerprint: str) -> bool:
        """Start, call and finish one item; whether it ended DONE with audio."""
        started = self.items.start(run, item_id, spoken, fingerprint)
        if started is None:
            return False
        if started.reused_from is not None:
            self.items.delete_orphans(started.orphaned_audio_paths)
            self.items.reused(run, item_id, started.reused_from)
            return True
        answer = self.calls.send(run, started)
        if answer is None:
            return False
        audio, error = answer
        return self.items.finish(run, started, audio, error)

    def _interrupt(self, run: Run) -> None:
        message = (
            "interrupted: the server stopped; Retry resumes without paying again for DONE items"
        )
        won = self.tx(lambda uow: uow.runs.interrupt_run(run.job_id, run.attempt, message))
        if won:
            metrics.RUNS.labels(outcome="INTERRUPTED").inc()
        log.info("run interrupted job=%s attempt=%s won=%s", run.job_id, run.attempt, won)

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
                    self._interrupt(run)
                except Exception:
                    log.exception("could not interrupt job=%s", run.job_id)
        self.gate.close()
        self.identity.stop()


def stop_starting_items() -> None:
    """Tell every runner of this process to start no new item (SIGTERM arrived)."""
    for runner in list(_RUNNERS):
        runner.stop_starting_items()


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
