"""The runner: sends claimed jobs' items to the provider, fenced by attempt.

- ``lifecycle``: a run's threads, its end, cancel, drain (SIGTERM), the gunicorn hooks;
- ``item``: one item's start and finish (one short fenced transaction each);
- ``call``: the provider call between them, with nothing held;
- ``gate``: the deployment's provider slots and pace, and waking those who wait;
- ``heartbeat``: this process's worker identity; ``loops``: background loops (resume).
"""

from __future__ import annotations

from speechbatch.runner.item import FRESH_FENCE_FRACTION, audio_key
from speechbatch.runner.lifecycle import (
    Runner,
    drain_all,
    start_background_all,
    stop_starting_items,
)

__all__ = [
    "FRESH_FENCE_FRACTION",
    "Runner",
    "audio_key",
    "drain_all",
    "start_background_all",
    "stop_starting_items",
]
