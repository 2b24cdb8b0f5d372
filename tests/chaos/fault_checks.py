"""The invariants the fault suite checks after every step, read from outside: the tables
(directly, not through the proxy), the storage directory, the provider's counts and the
API's usage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .fault_stack import PROVIDER_CONCURRENCY, STUCK_AFTER, FaultStack
from .harness import Checks, Database


class FaultDatabase(Database):
    """The rows whose objects must exist, for the jobs, renders and exports of one seed."""

    def objects(self, stack: FaultStack) -> list[tuple[str, int, str]]:
        """(what, id, storage key) of every DONE item, kept take, COMPLETED render (audio
        and captions) and COMPLETED export of this seed."""
        jobs = list(stack.jobs)
        rows = self._rows(
            "SELECT 'item' AS what, id, audio_path AS key FROM items"
            " WHERE job_id = ANY(%s) AND status = 'DONE'"
            " UNION ALL SELECT 'take', t.id, t.audio_path FROM takes t"
            " JOIN items i ON i.id = t.item_id WHERE i.job_id = ANY(%s)"
            " UNION ALL SELECT 'render', id, unnest(ARRAY[file_path, vtt_path, srt_path])"
            " FROM renders WHERE job_id = ANY(%s) AND status = 'COMPLETED'"
            " UNION ALL SELECT 'export', id, file_path FROM exports"
            " WHERE id = ANY(%s) AND status = 'COMPLETED'",
            (jobs, jobs, jobs, list(stack.exports)),
        )
        return [(r["what"], r["id"], r["key"]) for r in rows]

    def status(self, job_id: int) -> str:
        """The job's status, from its row."""
        return str(self._rows("SELECT status FROM jobs WHERE id = %s", (job_id,))[0]["status"])


@dataclass
class Usage:
    """``GET /api/usage``'s billed and in-doubt characters at one moment."""

    billed: int
    in_doubt: int
    received: int  # characters the provider received by then

    @staticmethod
    def now(stack: FaultStack) -> Usage:
        """Read the API's usage and the provider's count."""
        usage = stack.must("GET", "/api/usage")
        return Usage(
            int(usage["billed_characters"]),
            int(usage.get("in_doubt_characters", 0)),
            stack.fake.received_characters(),
        )


def check_objects(checks: Checks, db: FaultDatabase, stack: FaultStack) -> int:
    """No DONE item, kept take, COMPLETED render or export without its object."""
    objects = db.objects(stack)
    missing = [
        (what, row_id, key)
        for what, row_id, key in objects
        if key is not None and not (stack.storage / key).is_file()
    ]
    checks.check(
        "every DONE item, kept take, render and export has its object", not missing, missing
    )
    return len(objects)


def check_peak(checks: Checks, stack: FaultStack) -> int:
    """The provider never had more calls in flight than PROVIDER_CONCURRENCY."""
    peak = stack.fake.max_in_flight()
    checks.check("peak calls in flight <= PROVIDER_CONCURRENCY", peak <= PROVIDER_CONCURRENCY, peak)
    return peak


def check_calls(
    checks: Checks, stack: FaultStack, sends: dict[str, int], database_faults: dict[str, int]
) -> None:
    """Each text's calls at most: the runs that asked for it + the provider faults that hit
    it + the database faults injected while its job ran (each may cost one call again)."""
    counts = stack.fake.counts()
    over = {}
    for text, wanted in sends.items():
        bound = wanted + stack.fake.faults_for(text) + database_faults.get(text, 0)
        if counts.get(text, 0) > bound:
            over[text] = (counts.get(text, 0), bound)
    checks.check("each item's calls <= 1 per run + the faults that hit it", not over, over)


def check_billing(checks: Checks, before: Usage, after: Usage) -> dict[str, int]:
    """Billed = received + in doubt: what the ledger added is at least what the provider
    received and at most that plus the in-doubt characters."""
    billed = after.billed - before.billed
    in_doubt = after.in_doubt - before.in_doubt
    received = after.received - before.received
    checks.check(
        "billed - in doubt <= received <= billed",
        billed - in_doubt <= received <= billed,
        {"billed": billed, "in_doubt": in_doubt, "received": received},
    )
    return {"billed": billed, "in_doubt": in_doubt, "received": received}


def wait_not_wedged(stack: FaultStack, job_id: int, timeout: float = 90.0) -> dict[str, Any]:
    """Wait until the job is no longer GENERATING; AssertionError when it sits GENERATING
    without progress for STUCK_AFTER seconds after the database is back (a wedge)."""
    deadline = time.monotonic() + timeout
    texts = stack.jobs[job_id]
    progress_at = max(time.monotonic(), stack.database_back_at)
    last_mark: tuple[int, int] = (-1, -1)
    while True:
        job = stack.request("GET", f"/api/jobs/{job_id}")
        if job is not None and job.status_code == 200:
            view: dict[str, Any] = job.json()
            if view["status"] != "GENERATING":
                return view
            done = view["progress"]["done"] + view["progress"].get("error", 0)
            mark = (done, stack.fake.calls_for(texts))
            if mark != last_mark:
                last_mark, progress_at = mark, max(time.monotonic(), stack.database_back_at)
        now = time.monotonic()
        if now - progress_at > STUCK_AFTER:
            raise AssertionError(
                f"job {job_id} GENERATING without progress {now - progress_at:.1f} s after "
                f"the database was back (limit {STUCK_AFTER:g} s)"
            )
        if now > deadline:
            raise AssertionError(f"job {job_id} still GENERATING after {timeout:g} s")
        time.sleep(0.1)
