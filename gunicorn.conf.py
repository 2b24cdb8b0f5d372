"""gunicorn settings and worker hooks (loaded from the working directory)."""

from __future__ import annotations

import gc
import os
import signal
import sys
from typing import Any

graceful_timeout = 30


def on_starting(server: Any) -> None:
    """Refuse to start on bad configuration, with one line naming the variable."""
    from speechbatch.config import Settings
    from speechbatch.errors import ConfigError

    try:
        Settings.from_env()
    except ConfigError as exc:
        sys.stderr.write(f"speechbatch: configuration error: {exc.message}\n")
        sys.exit(1)


def post_worker_init(worker: Any) -> None:
    """Start the background tick (heartbeat, resume of interrupted jobs); stop starting
    items the moment SIGTERM arrives, not when the worker loop notices."""
    from speechbatch.runner.lifecycle import start_background_all, stop_starting_items

    start_background_all()

    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        stop_starting_items()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, on_term)
    # The app is loaded: its ~100,000 objects (modules, the Flask app, SQLAlchemy's
    # tables) live as long as the process. Frozen, a full collection no longer walks
    # them: it took 60-90 ms, a pause of every thread, runs and requests alike.
    gc.collect()
    gc.freeze()
    # From here on this worker accepts requests (the tests wait for every worker's line).
    worker.log.info("speechbatch worker ready (pid: %s)", os.getpid())


def worker_exit(server: Any, worker: Any) -> None:
    """On a graceful stop: finish in-flight calls, end runs INTERRUPTED, mark the worker."""
    from speechbatch.runner.lifecycle import drain_all

    # Leave a margin inside the master's grace period before it SIGKILLs the worker.
    drain_all(max(1.0, float(server.cfg.graceful_timeout) - 2.0))


def child_exit(server: Any, worker: Any) -> None:
    """A worker ended (gracefully or killed): in prometheus-client's multiprocess mode,
    mark it dead, so its live-only samples go while its counters keep being summed."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
