"""gunicorn settings and worker hooks (loaded from the working directory)."""

from __future__ import annotations

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


def worker_exit(server: Any, worker: Any) -> None:
    """On a graceful stop: start no new item, finish in-flight calls, end runs INTERRUPTED."""
    from speechbatch.runner import drain_all

    # Leave a margin inside the master's grace period before it SIGKILLs the worker.
    drain_all(max(1.0, float(server.cfg.graceful_timeout) - 2.0))
