"""The steps of one randomized crash run (test_chaos_crash_runs.py): the seeded plan of
fault kinds, what the runs share (``CrashContext``), the SIGKILL itself, the restart
after a server kill, and the edits of a job's lines and the restore of a take that some
runs add around the killed Generate.
"""

from __future__ import annotations

import random
import signal
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.server import ApiClient, GunicornServer, group_pids, wait_until

from .chaos_provider import ChaosFakeProvider
from .conftest import Spawn
from .harness import ChaosReport, Checks, Database, Observer, job_summary

KILL_SERVER = "kill-server"
KILL_JOB_WORKER = "kill-job-worker"
KILL_ALL_WORKERS = "kill-all-workers"
KILL_OTHER_WORKER = "kill-other-worker"


def plan_kinds(rng: random.Random, n: int) -> list[str]:
    """n fault kinds in a seeded random order, each kind present in a fixed share."""
    others = max(1, n // 5)
    rest = n - others
    kinds = (
        [KILL_SERVER] * (rest // 3)
        + [KILL_ALL_WORKERS] * (rest // 3)
        + [KILL_JOB_WORKER] * (rest - 2 * (rest // 3))
        + [KILL_OTHER_WORKER] * others
    )
    rng.shuffle(kinds)
    return kinds


@dataclass
class CrashContext:
    """What the crash runs share: one database, one fake, one server at a time."""

    rng: random.Random
    seed: int
    env: dict[str, str]
    token: str
    fake: ChaosFakeProvider
    db: Database
    storage: Path
    spawn: Spawn
    server: GunicornServer
    obs: Observer
    report: ChaosReport
    restarts: int = 0
    job_ids: list[int] = field(default_factory=list)
    recovery: dict[str, list[float]] = field(default_factory=dict)


def kill(ctx: CrashContext, kind: str, job_pid: int | None, checks: Checks) -> list[int]:
    """Send SIGKILL as ``kind`` says; return the PIDs that were killed."""
    server = ctx.server
    if kind == KILL_SERVER:
        server.signal_group(signal.SIGKILL)
        return [server.pid]
    if kind == KILL_ALL_WORKERS:
        return server.kill_workers(signal.SIGKILL)
    workers = server.worker_pids()
    checks.check("the job's worker is a worker of this server", job_pid in workers, workers)
    assert job_pid is not None
    if kind == KILL_JOB_WORKER:
        server.kill_worker(job_pid, signal.SIGKILL)
        return [job_pid]
    other = [p for p in workers if p != job_pid]
    checks.check("there is a bystander worker", other, workers)
    server.kill_worker(other[0], signal.SIGKILL)
    return [other[0]]


def restart_after_server_kill(ctx: CrashContext, checks: Checks) -> None:
    """Reap the killed server and start a fresh one on the same database and storage."""
    old = ctx.server
    checks.check("the master died of SIGKILL", old.wait_exit(10) is not None, old.pid)
    wait_until(lambda: not group_pids(old.pid), 10, what="killed group gone")
    old.stop(graceful=False)
    ctx.restarts += 1
    ctx.server = ctx.spawn(ctx.env, name=f"crash-{ctx.restarts + 1}")
    ctx.obs.use(ApiClient(ctx.server.base_url, ctx.token))


def edit_lines(
    obs: Observer, checks: Checks, job_id: int, texts: list[str], positions: list[int]
) -> dict[int, str]:
    """PATCH the items at ``positions`` of a COMPLETED job with new texts; answer
    {position: the text it had}. Each edited item is PENDING with its old audio kept."""
    items = obs.read(job_id)
    checks.check("job readable before the edits", items is not None)
    assert items is not None
    before: dict[int, str] = {}
    for position in positions:
        item = items["items"][position]
        before[position] = texts[position]
        texts[position] = f"{texts[position]} (edited)"
        response = obs.request(
            "PATCH", f"/api/jobs/{job_id}/items/{item['id']}", {"text": texts[position]}
        )
        checks.check(
            "an edit of a COMPLETED job answers 200",
            response is not None and response.status_code == 200,
            None if response is None else response.text[:300],
        )
    edited = obs.read(job_id)
    assert edited is not None
    checks.check(
        "edited items are PENDING and stale with their audio kept; the job PENDING",
        edited["status"] == "PENDING"
        and edited["progress"]["stale"] == len(positions)
        and all(
            edited["items"][p]["status"] == "PENDING" and edited["items"][p]["audio_url"]
            for p in positions
        ),
        job_summary(edited),
    )
    return before


def restore_first_take(
    obs: Observer, checks: Checks, job_id: int, texts: list[str], position: int, text: str
) -> None:
    """Restore take 1 of an edited line after the crash and the retries: no provider
    call, the line's text and audio are take 1's again, the job stays COMPLETED."""
    job = obs.read(job_id)
    assert job is not None
    item = job["items"][position]
    url = f"/api/jobs/{job_id}/items/{item['id']}/takes"
    listed = obs.request("GET", url)
    takes = [] if listed is None or listed.status_code != 200 else listed.json()["takes"]
    checks.check(
        "the edited line keeps its first take",
        [t["text"] for t in takes if t["take"] == 1] == [text],
        takes,
    )
    calls = obs.fake.total_calls()
    response = obs.request("POST", f"{url}/1/restore")
    checks.check(
        "a restore answers 200",
        response is not None and response.status_code == 200,
        None if response is None else response.text[:300],
    )
    checks.check("a restore makes no provider call", obs.fake.total_calls() == calls)
    texts[position] = text
    restored = obs.read(job_id)
    assert restored is not None
    checks.check(
        "after a restore the line is its first take, DONE, and the job COMPLETED",
        restored["items"][position]["text"] == text
        and restored["items"][position]["status"] == "DONE"
        and not restored["items"][position]["stale"]
        and restored["status"] == "COMPLETED",
        job_summary(restored),
    )
