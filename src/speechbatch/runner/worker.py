"""The worker tier: ``flask --app wsgi worker`` processes that run what web processes claim.

A worker serves no HTTP. It registers and heartbeats like a web process (its
``Runner``'s identity), runs the resume tick, and takes work within a second or two of
a claim: on PostgreSQL a LISTEN on ``RUN_CHANNEL`` wakes it at the claim's commit (as
the slot listener of ``gate.py`` does for releases), and a poll every ``poll_seconds``
is the fallback (SQLite, a lost notification, a run another worker failed to take).

Every kind of work a worker takes is a *taker*, a callable that takes what is waiting
by compare-and-set, starts it on threads of this process and says how many it took.
The app wires them (``app.build_worker_tier``): claimed runs, and the exports and renders
that web processes queued (``runner/builders.py``).

SIGTERM is as graceful as gunicorn's: ``stop()`` (from the signal handler) takes nothing
more and starts no new item; ``drain()`` then lets in-flight calls finish within the
grace period, ends the runs INTERRUPTED (the resume tick of a live worker resumes them)
and marks the worker stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from speechbatch.adapters import metrics
from speechbatch.adapters.notifications import listen
from speechbatch.adapters.repositories.workers import RUN_CHANNEL
from speechbatch.adapters.uow import RunUowFactory
from speechbatch.runner.lifecycle import Runner

log = logging.getLogger(__name__)

# Runs looked at per take; the next take (at once, if any was taken) gets the rest.
RUNS_PER_TAKE = 20
POLL_SECONDS = 1.0
Taker = Callable[[], int]


class WorkerTier:
    """One worker process: its runner, the takers of work, the wake-ups and the stop."""

    def __init__(
        self,
        runner: Runner,
        uow_factory: RunUowFactory,
        listen_dsn: str | None = None,
        *,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.runner = runner
        self._uow_factory = uow_factory
        self._listen_dsn = listen_dsn
        # The fallback when no notification comes (SQLite, a lost one); tests lengthen it.
        self.poll_seconds = poll_seconds
        self._wake = threading.Event()
        self._stop = threading.Event()
        # Set once the worker would notice a claim (it listens, or it only polls).
        self.listening = threading.Event()
        # What a worker takes; the app adds the builders' takers (see above).
        self.takers: list[Taker] = [self.take_waiting_runs]
        # Graceful-stop steps beside the runner's (e.g. waiting for exports being built).
        self.drainers: list[Callable[[float], object]] = []

    def take_waiting_runs(self) -> int:
        """Take the runs no worker has taken yet (compare-and-set each) and start them."""
        if self.runner.draining:
            return 0
        worker_id = self.runner.worker_id()
        with self._uow_factory() as uow:
            waiting = uow.workers.waiting_runs(RUNS_PER_TAKE)
        taken = 0
        for run in waiting:
            if self.runner.draining:
                break
            with self._uow_factory() as uow:
                if not uow.workers.take_run(run.job_id, run.attempt, worker_id):
                    continue  # another worker took it, or it ended meanwhile
                uow.commit()
            metrics.CLAIMS.labels(result="taken").inc()
            log.info("worker took job=%s attempt=%s", run.job_id, run.attempt)
            self.runner.start(run.job_id, run.attempt)
            taken += 1
        return taken

    def serve(self) -> None:
        """Take work until ``stop()``: at every wake-up and every ``poll_seconds``."""
        self.runner.start_background(self.runner.background_tick)
        if self._listen_dsn is not None:
            listener = threading.Thread(
                target=self._listen, name="speechbatch-run-listener", daemon=True
            )
            listener.start()
        else:
            self.listening.set()
        log.info("speechbatch worker serving (worker id %s)", self.runner.worker_id())
        while not self._stop.is_set():
            self._wake.clear()
            took = sum(self._take(taker) for taker in self.takers)
            if not took:
                self._wake.wait(self.poll_seconds)

    def _take(self, taker: Taker) -> int:
        try:
            return taker()
        except Exception:
            # A database blip: the next wake-up or poll tries again.
            log.exception("worker could not take work")
            return 0

    def _listen(self) -> None:
        assert self._listen_dsn is not None
        listen(
            self._listen_dsn,
            RUN_CHANNEL,
            on_notify=lambda payload: self._wake.set(),
            on_listening=self._listening,
            closed=self._stop,
            wait_seconds=1.0,
        )

    def _listening(self) -> None:
        # A claim may have come while not listening: look now.
        self.listening.set()
        self._wake.set()

    def stop(self) -> None:
        """Take nothing more and start no new item (safe from a signal handler)."""
        self.runner.stop_starting_items()
        self._stop.set()
        self._wake.set()

    def drain(self, timeout: float) -> None:
        """Graceful stop: in-flight calls finish, runs end INTERRUPTED, the worker is marked."""
        self.stop()
        deadline = time.monotonic() + timeout
        self.runner.drain(timeout)
        for drainer in self.drainers:
            drainer(max(0.0, deadline - time.monotonic()))
