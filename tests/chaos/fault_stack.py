"""The fault suite's stack: a real gunicorn on PostgreSQL through the fault proxy, the
chaos provider, a webhook receiver, and the operations and faults a schedule names.

Nothing here imports ``speechbatch``: the app is reached through its environment, its
JSON API, its tables (directly, not through the proxy) and its storage directory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.support.pg_proxy import PgProxy
from tests.support.server import ApiClient, GunicornServer, Job
from tests.support.webhook_receiver import Receiver

from .chaos_provider import ChaosFakeProvider
from .fault_schedule import DATABASE_FAULTS, Step
from .harness import JOB_EVENTS, TTS_TIMEOUT_SECONDS, WORKER_DEAD_SECONDS, chaos_env

# Short enough that a hole of 3-5 s outlasts it, so units of work are given up.
DB_RETRY_SECONDS = 2.0
# Fewer slots than a run's lanes: the slots, not the lanes, bound the calls in flight.
PROVIDER_CONCURRENCY = 2
ITEM_CONCURRENCY = 3
# A job GENERATING this long after the database is back, with no progress, is wedged.
STUCK_AFTER = WORKER_DEAD_SECONDS + 10.0
HANG_HOLD = TTS_TIMEOUT_SECONDS + 1.0  # a hung call outlasts the client's timeout
MAX_RETRIES = 4
ITEM_WRITES = b"UPDATE items"


def fault_env(database_url: str, provider_url: str, storage: Path) -> dict[str, str]:
    """The server's environment: the chaos suite's, with short database retries."""
    env = chaos_env(database_url, provider_url, storage)
    env["SPEECHBATCH_DB_RETRY_SECONDS"] = f"{DB_RETRY_SECONDS:g}"
    env["SPEECHBATCH_PROVIDER_CONCURRENCY"] = str(PROVIDER_CONCURRENCY)
    env["SPEECHBATCH_ITEM_CONCURRENCY"] = str(ITEM_CONCURRENCY)
    return env


@dataclass
class FaultStack:
    """Everything one seed's schedule runs against, and what it made."""

    url: str  # the database, directly
    proxy: PgProxy
    fake: ChaosFakeProvider
    server: GunicornServer
    storage: Path
    api: ApiClient
    receiver: Receiver
    jobs: dict[int, list[str]] = field(default_factory=dict)  # job id -> its texts
    completed: list[int] = field(default_factory=list)
    renders: list[tuple[int, int]] = field(default_factory=list)  # (job id, render id)
    exports: list[int] = field(default_factory=list)
    database_back_at: float = 0.0  # time.monotonic() when the last database fault ended

    def request(self, method: str, path: str, body: Any = None) -> requests.Response | None:
        """One API call; None when the server did not answer at all."""
        try:
            return self.api.request(method, path, body)
        except requests.RequestException:
            return None

    def must(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Job:
        """An API call retried through 5xx and silence until it answers 2xx; its JSON."""
        deadline = time.monotonic() + timeout
        while True:
            response = self.request(method, path, body)
            if response is not None and response.status_code < 300:
                answer: Job = response.json()
                return answer
            if time.monotonic() > deadline:
                detail = None if response is None else (response.status_code, response.text[:300])
                raise AssertionError(f"{method} {path}: no 2xx within {timeout:g} s: {detail}")
            time.sleep(0.2)

    def subscribe(self) -> int:
        """Register the receiver for job.* events; the webhook's id."""
        created = self.must(
            "POST", "/api/webhooks", {"url": self.receiver.url, "events": JOB_EVENTS}
        )
        self.receiver.secret = created["secret"]
        return int(created["id"])


def unique_texts(tag: str, count: int) -> list[str]:
    """``count`` texts no other test sends (the provider counts calls per text)."""
    return [
        f"Fault {tag} line {n}: the quick brown fox jumps over the lazy dog." for n in range(count)
    ]


def own_writes(operation: str) -> bytes:
    """The bytes of the statements that make the operation's results current, so that
    its acknowledgements are lost, not the heartbeats':
    - a run's or a regenerate's item writes (its begins and finishes);
    - a cancel's finishes (the only item writes that keep a take), so that the cancel
      can land between a finish's commit and its retry;
    - a render's or an export's final write (the only one that sets ``file_path``)."""
    if operation in ("render", "export"):
        return b"file_path="
    if operation == "cancel":
        return b"INSERT INTO takes"
    return ITEM_WRITES


def wait_for_lost_ack(stack: FaultStack, dropped: int, timeout: float = 1.0) -> None:
    """Wait (up to ``timeout``) until the proxy has lost more acknowledgements than
    ``dropped``."""
    deadline = time.monotonic() + timeout
    while stack.proxy.stats.acks_dropped <= dropped and time.monotonic() < deadline:
        time.sleep(0.005)


def inject(stack: FaultStack, step: Step) -> None:
    """Inject the step's fault now (returns at once; holes and storms end by themselves)."""
    fault, size = step.fault, step.size
    if fault == "black_hole":
        stack.proxy.black_hole(size, refuse=True)
    elif fault == "stall":
        stack.proxy.black_hole(size)
    elif fault == "reset_all":
        stack.proxy.reset_all()
    elif fault == "lost_acks":
        stack.proxy.drop_after_commit(size, touching=own_writes(step.operation))
    elif fault == "items_refused":
        stack.proxy.refuse_touching(size, ITEM_WRITES)
    elif fault == "storm":
        stack.fake.storm(size, retry_after=min(size, TTS_TIMEOUT_SECONDS))
    elif fault == "hang":
        stack.fake.hang(size, HANG_HOLD)
    elif fault == "refuse":
        stack.fake.refuse(size)
    elif fault == "provider_reset":
        stack.fake.reset_next(size)


def after_fault(stack: FaultStack, step: Step) -> float:
    """Wait until the fault's window is over (the database reachable again, the storm or
    the hang over, the provider listening); the monotonic time it was."""
    if step.fault in DATABASE_FAULTS:
        back = stack.proxy.wait_until_back(60)
    else:
        if step.fault in ("storm", "hang"):
            time.sleep(step.size)
        stack.fake.wait_listening()
        back = time.monotonic()
    stack.database_back_at = back
    return back


def calm(stack: FaultStack) -> None:
    """Once the operation has ended: end the provider's weather and forget the resets and
    lost acknowledgements not injected yet (so that a retry is judged without faults)."""
    stack.fake.calm()
    left = stack.proxy.drops_left()
    if left:
        stack.proxy.drop_after_commit(-left)
