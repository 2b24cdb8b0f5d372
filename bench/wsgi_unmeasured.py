"""``gunicorn --pythonpath bench wsgi_unmeasured:app``: the product's app with the finish's
audio measurement left out (every item recorded "not measured", as for audio that cannot be
decoded), for bench/measure_cost.py's B side. Bench-only: the product has no such switch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import speechbatch.runner.finish as finish_module
from speechbatch.runner.measure import Measured


def unmeasured(audio: bytes, spoken_text: str, options: Mapping[str, Any]) -> Measured:
    """Measure nothing."""
    return Measured()


finish_module.measure_audio = unmeasured

from wsgi import app  # noqa: E402  (after the patch: the runner is built by create_app)

__all__ = ["app"]
