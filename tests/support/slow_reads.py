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
services.storage = SlowReads(services.storage.root)
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
