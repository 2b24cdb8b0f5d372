"""The runner of a web process when runs belong to the worker tier (SPEECHBATCH_RUNNER=worker).

A click still claims at once (202, GENERATING): the claim opens the run with no worker on
it and notifies the workers in its own transaction (``services.generation``). This
process then starts nothing and sends nothing to the provider: a ``flask --app wsgi
worker`` process takes the run (``worker.py``). A cancel is the database's alone: the
worker's next fenced write finds the run over.
"""

from __future__ import annotations

import logging

from speechbatch.adapters.providers.base import TTSProvider

log = logging.getLogger(__name__)


class RunHandOff:
    """Claims for the worker tier: no worker id, no thread, no provider call."""

    def __init__(self, provider: TTSProvider) -> None:
        # Only for the claim's budget check (characters to bill); never called here.
        self.provider = provider

    def worker_id(self) -> None:
        """No worker: the claimed run waits for one of the worker tier."""
        return None

    def start(self, job_id: int, attempt: int) -> None:
        """Leave the run to the worker tier (the claim's commit has woken it)."""
        log.info("run left to the worker tier job=%s attempt=%s", job_id, attempt)

    def cancel(self, job_id: int, attempt: int) -> None:
        """Nothing runs here: the cancel's compare-and-set fences the worker's run."""
