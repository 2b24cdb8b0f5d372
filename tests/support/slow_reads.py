"""gunicorn serving the app with slow reads of item audio, to catch background work
(an export, a render) in the middle of it. The app is served through a small wrapper
module written to the test's tmp dir; nothing in the product reads a test knob."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.server import GunicornServer

MODULE = "slow_reads_wsgi"
SLOW_WSGI = '''
"""The app, with item audio reads slowed down so that background work takes a while."""

import time

from speechbatch import create_app
from speechbatch.adapters.storage import LocalStorage


class SlowReads(LocalStorage):
    def open(self, key):
        if key.startswith("jobs/"):
            time.sleep({delay})
        return super().open(key)


app = create_app()
services = app.extensions["speechbatch"]
services.builders.storage = SlowReads(services.storage.root)
'''


def slow_reads_server(
    env: Mapping[str, str], tmp_path: Path, *, delay: float, **kwargs: Any
) -> GunicornServer:
    """A GunicornServer (not started) of the app whose storage sleeps ``delay`` seconds
    before each read of item audio; ``kwargs`` go to GunicornServer."""
    module_dir = tmp_path / "wsgi"
    module_dir.mkdir(exist_ok=True)
    (module_dir / f"{MODULE}.py").write_text(SLOW_WSGI.format(delay=delay))
    return GunicornServer(
        env,
        tmp_path,
        app=f"{MODULE}:app",
        extra_args=("--pythonpath", str(module_dir)),
        **kwargs,
    )


HELD_MODULE = "held_reads_wsgi"
HELD_WSGI = '''
"""The app, with item audio reads held while a file exists: background work waits there."""

import os
import time

from speechbatch import create_app
from speechbatch.adapters.storage import LocalStorage


class HeldReads(LocalStorage):
    def open(self, key):
        while key.startswith("jobs/") and os.path.exists({hold!r}):
            time.sleep(0.02)
        return super().open(key)


app = create_app()
services = app.extensions["speechbatch"]
services.builders.storage = HeldReads(services.storage.root)
'''


def held_reads_server(
    env: Mapping[str, str], tmp_path: Path, *, hold: Path, **kwargs: Any
) -> GunicornServer:
    """A GunicornServer (not started) of the app whose renders and exports wait before
    each read of item audio for as long as the file ``hold`` exists: a test keeps them
    RUNNING exactly as long as it needs. ``kwargs`` go to GunicornServer."""
    module_dir = tmp_path / "wsgi"
    module_dir.mkdir(exist_ok=True)
    (module_dir / f"{HELD_MODULE}.py").write_text(HELD_WSGI.format(hold=str(hold)))
    return GunicornServer(
        env,
        tmp_path,
        app=f"{HELD_MODULE}:app",
        extra_args=("--pythonpath", str(module_dir)),
        **kwargs,
    )
