"""The runner: sends claimed jobs' items to the provider, fenced by attempt.

- ``lifecycle``: a run's threads, its beat, its end, cancel, drain (SIGTERM), the
  gunicorn hooks;
- ``item``: one item's pipeline, ``begin → pace → send → finish`` (``begin.py``,
  ``pace.py``, ``send.py``, ``finish.py``; ``hold.py`` owns an attempt's slot and
  reservation; ``attempt.py`` the values passed along; ``steps.py`` what they share);
- ``gate``: the deployment's provider slots and pace, and waking those who wait;
- ``heartbeat``: this process's worker identity and its runs' beat; ``loops``:
  background loops (resume); ``worker``: the worker tier; ``deliveries``: webhooks.
"""

from __future__ import annotations

from speechbatch.runner.attempt import audio_key
from speechbatch.runner.lifecycle import (
    Runner,
    drain_all,
    start_background_all,
    stop_starting_items,
)
from speechbatch.runner.steps import FRESH_FENCE_FRACTION

__all__ = [
    "FRESH_FENCE_FRACTION",
    "Runner",
    "audio_key",
    "drain_all",
    "start_background_all",
    "stop_starting_items",
]
