"""The probe of bench/lanes.py, loaded by every Python process that has this folder on its
PYTHONPATH and SB_LANES_PROBE set (the path prefix of its output files).

In each forked child (a gunicorn worker) a thread waits for the app's modules to be
loaded, then wraps ``Runner.start`` (the run's start, right after the claim), ``Runner._run``
(the run's end) and ``OpenAIProvider.synthesize`` (each call's send and answer, by
thread), stamping them with the worker's monotonic clock and its CPU time. At each run's
end it writes everything so far to ``PREFIX-PID.json``: a list of
``[monotonic, kind, thread, {details}]``. With SB_LANES_GAPS set it also stamps what
happens between two calls of a lane (``_patch_gaps``). Instrumentation only: nothing
else changes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

PREFIX = os.environ.get("SB_LANES_PROBE")
_events: list[tuple[float, str, str, dict[str, Any]]] = []
_lock = threading.Lock()


def _record(kind: str, **details: Any) -> None:
    with _lock:
        _events.append((time.monotonic(), kind, threading.current_thread().name, details))


def _dump() -> None:
    with _lock:
        events = list(_events)
    with open(f"{PREFIX}-{os.getpid()}.json", "w") as f:
        json.dump(events, f)


def _patch() -> None:
    from speechbatch.providers.openai import OpenAIProvider
    from speechbatch.runner import Runner

    synthesize, start, run = OpenAIProvider.synthesize, Runner.start, Runner._run

    def timed_synthesize(self: Any, text: str, voice: str) -> bytes:
        _record("send", text=text)
        try:
            return synthesize(self, text, voice)
        finally:
            _record("answer", text=text)

    def timed_start(self: Any, job_id: int, attempt: int) -> None:
        _record("run_start", job=job_id, cpu=time.process_time())
        start(self, job_id, attempt)

    def timed_run(self: Any, state: Any) -> None:
        try:
            run(self, state)
        finally:
            _record("run_end", job=state.job_id, cpu=time.process_time())
            _dump()

    OpenAIProvider.synthesize = timed_synthesize  # type: ignore[method-assign]
    Runner.start = timed_start  # type: ignore[method-assign]
    Runner._run = timed_run  # type: ignore[method-assign, assignment]
    if os.environ.get("SB_LANES_GAPS"):
        _patch_gaps(Runner)


def _patch_gaps(runner: Any) -> None:
    """Stamp what a lane does between two calls: the audio file's write, each
    transaction of the runner (``Runner._tx``), each statement and each commit."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from speechbatch.storage import LocalStorage

    write, tx = LocalStorage.write, runner._tx

    def timed_write(self: Any, key: str, data: bytes) -> None:
        _record("write")
        try:
            write(self, key, data)
        finally:
            _record("written")

    def timed_tx(self: Any, work: Any) -> Any:
        _record("tx")
        try:
            return tx(self, work)
        finally:
            _record("tx_end")

    def statement(*args: Any) -> None:
        _record("sql")

    def answered(*args: Any) -> None:
        _record("sql_end")

    def commit(*args: Any) -> None:
        _record("commit")

    event.listen(Engine, "before_cursor_execute", statement)
    event.listen(Engine, "after_cursor_execute", answered)
    event.listen(Engine, "commit", commit)
    LocalStorage.write = timed_write  # type: ignore[method-assign]
    runner._tx = timed_tx


def _loaded() -> bool:
    runner = sys.modules.get("speechbatch.runner")
    provider = sys.modules.get("speechbatch.providers.openai")
    app = sys.modules.get("speechbatch.app")
    # A module is in sys.modules while it still executes: wait for the names it defines.
    return all(
        getattr(module, name, None) is not None
        for module, name in ((runner, "Runner"), (provider, "OpenAIProvider"), (app, "create_app"))
    )


def _wait_and_patch() -> None:
    while not _loaded():
        time.sleep(0.05)
    time.sleep(0.2)  # the app's own import of them has finished too
    _patch()
    # bench/lanes.py starts its first job once this file is there.
    open(f"{PREFIX}-ready-{os.getpid()}", "w").close()


if PREFIX:
    os.register_at_fork(
        after_in_child=lambda: threading.Thread(target=_wait_and_patch, daemon=True).start()
    )
