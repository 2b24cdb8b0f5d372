"""The fault suite's heal meets a resume that won the race for the job (found by the
20-seed soak, seed 17, and FAULT_SEEDS=3: step 1, a run under a database black hole).

The window: a black hole longer than DB_RETRY_SECONDS interrupts the run; the deployment
resumes an INTERRUPTED run within WORKER_DEAD_SECONDS. When the resume claims the job
between heal's read that saw it idle and heal's Retry, the Retry answers 409
``already_generating`` (the contract's answer while a run goes on), which heal took for a
refusal. Here a scripted stack answers exactly that, with no timing involved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import requests

from .fault_stack import FaultStack
from .test_faults import RESUMES, Ledger, heal

TEXTS = ["first line", "second line"]


def answer(status: int, body: dict[str, Any]) -> requests.Response:
    """A response as the API answers it."""
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps(body).encode()
    return response


class _Provider:
    def calls_for(self, texts: list[str]) -> int:
        return 0


@dataclass
class ScriptedStack:
    """GET answers the next status of ``statuses`` (the last one stays); each POST
    .../generate answers the next of ``retries``."""

    statuses: list[str]
    retries: list[int]
    jobs: dict[int, list[str]] = field(default_factory=lambda: {1: TEXTS})
    completed: list[int] = field(default_factory=list)
    database_back_at: float = 0.0
    fake: _Provider = field(default_factory=_Provider)
    posts: int = 0

    def request(self, method: str, path: str, body: Any = None) -> requests.Response:
        if method == "POST":
            self.posts += 1
            status = self.retries.pop(0)
            if status == 409:
                error = {"code": "already_generating", "message": "already generating"}
                return answer(409, {"error": error})
            return answer(status, {"id": 1, "status": "GENERATING"})
        now = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        items = [{"status": "DONE" if now == "COMPLETED" else "PENDING"} for _ in TEXTS]
        return answer(200, {"id": 1, "status": now, "items": items, "progress": {"done": 0}})


def test_a_retry_that_meets_the_resumed_run_waits_for_it() -> None:
    # Idle after the interruption; the Retry meets the resume; the resumed run completes.
    stack = ScriptedStack(statuses=["FAILED", "GENERATING", "COMPLETED"], retries=[409])
    ledger = Ledger()
    heal(cast(FaultStack, stack), ledger, 1)
    assert stack.posts == 1
    assert stack.completed == [1]
    assert ledger.sends == {text: 1 for text in TEXTS}  # the resume asked for both lines


def test_a_job_that_only_ever_answers_already_generating_still_fails() -> None:
    # A job that looks idle on every read, and whose every Retry is refused: not healed.
    stack = ScriptedStack(statuses=["FAILED"], retries=[409] * (RESUMES + 1))
    with pytest.raises(AssertionError, match="refused after the faults"):
        heal(cast(FaultStack, stack), Ledger(), 1)
    assert stack.posts == RESUMES + 1
