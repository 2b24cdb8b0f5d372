"""A WSGI entry for process-level tests: the real app plus a pause point before a call.

``gunicorn tests.support.pause_point:app`` serves ``wsgi:app`` unchanged, except that a
run's item whose text contains ``PAUSE_MARKER`` stops right after its fenced start and
before its provider call (the window a frozen zombie would sit in) when the environment
variable ``PAUSE_POINT_DIR`` names a directory: the worker writes ``paused`` there (its
PID) and waits until a ``release`` file appears. The test freezes the process there with
SIGSTOP, lets another server take the item over, creates ``release`` and sends SIGCONT.
(The names are the constants of tests/support/server.py.)

Unlike the rest of tests/support this module runs inside the app's process (it is the
only place that imports ``speechbatch``); the app itself has no test hook.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from wsgi import app

import speechbatch.runner.item
from tests.support.server import PAUSE_DIR_VARIABLE, PAUSE_MARKER, PAUSED_FILE, RELEASE_FILE

_PAUSE_DIR = os.environ.get(PAUSE_DIR_VARIABLE)
_real_pace = speechbatch.runner.item.pace


def _pausing_pace(steps: Any, attempt: Any) -> Any:
    """The item's pace step, after its fenced begin and before its send."""
    if _PAUSE_DIR and PAUSE_MARKER in attempt.text:
        directory = Path(_PAUSE_DIR)
        # Written under another name and renamed: the test reads the pid as soon as the
        # file exists, and once found it empty (created, not yet written) on a loaded
        # machine.
        staged = directory / f".{PAUSED_FILE}.{os.getpid()}"
        staged.write_text(str(os.getpid()))
        os.replace(staged, directory / PAUSED_FILE)
        while not (directory / RELEASE_FILE).exists():
            time.sleep(0.01)
    return _real_pace(steps, attempt)


speechbatch.runner.item.pace = _pausing_pace

__all__ = ["app"]
