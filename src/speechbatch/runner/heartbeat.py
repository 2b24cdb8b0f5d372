"""This process's worker identity and its heartbeat thread.

Each beat stamps, in one transaction, the worker's row and the beat of every run this
process is running now (``running``): liveness is the run's, so a run this process gave
up stops being stamped even though the process lives on. The heartbeat thread does
nothing else: background work (the resume tick) runs on threads of its own
(``loops.py``), so however slow it is, it never makes this process's live runs look dead.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

from speechbatch.adapters.uow import RunUowFactory

log = logging.getLogger(__name__)


class WorkerIdentity:
    """Registers this process start as a new worker and heartbeats it from a thread.

    Registration is lazy (at the first run this process starts) so that CLI commands and
    processes that never run a job leave no rows; a forked child (a respawned gunicorn
    worker) notices the new PID and registers itself anew.
    """

    def __init__(
        self,
        uow_factory: RunUowFactory,
        interval_seconds: float,
        running: Callable[[], list[tuple[int, int]]] = list,
    ) -> None:
        self._uow_factory = uow_factory
        self._interval = interval_seconds
        # (job, attempt) of the runs this process is running now: the ones it beats for.
        self._running = running
        self._lock = threading.Lock()
        self._id: int | None = None
        self._pid: int | None = None
        self._stop = threading.Event()

    @property
    def interval_seconds(self) -> float:
        """Seconds between two heartbeats."""
        return self._interval

    def id(self) -> int:
        """This process's worker id, registering it on first use."""
        pid = os.getpid()
        with self._lock:
            if self._id is None or self._pid != pid:
                with self._uow_factory() as uow:
                    self._id = uow.workers.register_worker(socket.gethostname(), pid)
                    uow.commit()
                self._pid = pid
                self._stop = threading.Event()
                threading.Thread(
                    target=self._beat, args=(self._id, self._stop), name="speechbatch-heartbeat",
                    daemon=True,
                ).start()  # fmt: skip
                log.info("worker registered id=%s pid=%s", self._id, pid)
            return self._id

    def _beat(self, worker_id: int, stop: threading.Event) -> None:
        while not stop.wait(self._interval):
            try:
                running = self._running()
                with self._uow_factory() as uow:
                    uow.workers.heartbeat_worker(worker_id)
                    uow.workers.beat_runs(worker_id, running)
                    uow.commit()
            except Exception:
                # A database blip must not kill the heartbeat; a long one makes this
                # process's runs look dead, and fencing then keeps them from writing.
                log.exception("worker heartbeat failed id=%s", worker_id)

    def stop(self) -> None:
        """Stop heartbeating and record that this worker stopped on purpose."""
        with self._lock:
            if self._id is None or self._pid != os.getpid():
                return
            self._stop.set()
            try:
                with self._uow_factory() as uow:
                    uow.workers.mark_worker_stopped(self._id)
                    uow.commit()
            except Exception:
                log.exception("could not mark worker stopped id=%s", self._id)
            self._id = None
