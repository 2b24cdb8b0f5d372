"""gunicorn settings and worker hooks (loaded from the working directory)."""

from __future__ import annotations

from typing import Any

graceful_timeout = 30


def worker_exit(server: Any, worker: Any) -> None:
    """On a graceful stop: start no new item, finish in-flight calls, end runs INTERRUPTED."""
    from speechbatch.runner import drain_all

    # Leave a margin inside the master's grace period before it SIGKILLs the worker.
    drain_all(max(1.0, float(server.cfg.graceful_timeout) - 2.0))
