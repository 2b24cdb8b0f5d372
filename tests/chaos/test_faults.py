"""Faults injected on purpose (issue 41, item 8): seeded random schedules of database and
provider faults against runs, cancels, regenerates, renders and exports on a real gunicorn
whose PostgreSQL sits behind the fault proxy, each step followed by every invariant:

- no DONE item, kept take, COMPLETED render or export without its object in storage;
- no job GENERATING without progress more than WORKER_DEAD_SECONDS + 10 s after the
  database is back, and Retry works then;
- peak calls in flight at the provider <= PROVIDER_CONCURRENCY;
- each item's calls <= 1 per run that asked for it + the faults that hit it;
- billed (GET /api/usage) = received + in doubt;
- one job.* webhook event per ended run, delivered to a loopback receiver.

CI runs the fixed seeds of fault_schedule.CI_SEEDS; ``FAULT_SEEDS=1,2,3:4`` replays others
(seed 3's first 4 steps);
a failing step prints its seed and the whole schedule. ``bench/faults.py`` runs long soaks.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import requests

from tests.support.pg_proxy import PgProxy
from tests.support.server import ApiClient, GunicornServer
from tests.support.webhook_receiver import Receiver

from .chaos_provider import ChaosFakeProvider
from .conftest import FAKE_API_KEY
from .fault_checks import (
    FaultDatabase,
    Usage,
    check_billing,
    check_calls,
    check_objects,
    check_peak,
    wait_not_wedged,
)
from .fault_schedule import DATABASE_FAULTS, Step, describe, make_schedule, seeds_to_run
from .fault_stack import (
    MAX_RETRIES,
    FaultStack,
    after_fault,
    calm,
    fault_env,
    inject,
    unique_texts,
    wait_for_lost_ack,
)
from .harness import THREADS, WORKERS, ChaosReport, Checks, Row, check_run_events_delivered

SETTLE = 90.0  # the longest one render or export may take to end, faults included
# Resumes of one job without a click that a Retry may meet (loops.MAX_RESUMES_WITHOUT_PROGRESS).
RESUMES = 3


@pytest.fixture
def stack(chaos_db: tuple[str, str], tmp_path: Path) -> Iterator[FaultStack]:
    """A fresh proxy, provider, receiver and gunicorn (2 workers x 2 threads) for one seed."""
    url, token = chaos_db
    proxy = PgProxy().start()
    fake = ChaosFakeProvider(latency=0.15, api_key=FAKE_API_KEY, real_audio=True).start()
    receiver = Receiver()
    storage = tmp_path / "audio"
    env = fault_env(proxy.url(url), fake.url, storage)
    server = GunicornServer(env, tmp_path, workers=WORKERS, threads=THREADS, name="faults")
    webhook = None
    try:
        server.start()
        made = FaultStack(
            url, proxy, fake, server, storage, ApiClient(server.base_url, token), receiver
        )
        webhook = made.subscribe()
        yield made
    finally:
        if webhook is not None:  # the folder's database outlives this receiver
            with contextlib.suppress(Exception):
                ApiClient(server.base_url, token).request("DELETE", f"/api/webhooks/{webhook}")
        server.stop(graceful=False)
        receiver.stop()
        fake.stop()
        proxy.stop()


class Ledger:
    """What the schedule asked of each text, to bound its calls."""

    def __init__(self) -> None:
        self.sends: Counter[str] = Counter()  # runs that asked for the text
        self.database_faults: Counter[str] = Counter()  # database faults during its runs

    def asked(self, texts: list[str], step: Step | None) -> None:
        """A run of ``texts`` started (``step``: under that step's fault)."""
        for text in texts:
            self.sends[text] += 1
            if step is not None and step.fault in DATABASE_FAULTS:
                self.database_faults[text] += max(step.size, 1)


def heal(stack: FaultStack, ledger: Ledger, job_id: int) -> float | None:
    """Retry the job until COMPLETED (each retry without faults); seconds from the
    database's return until the first Retry was accepted (None: no retry needed).

    A run that a fault INTERRUPTED is resumed by the deployment within
    WORKER_DEAD_SECONDS; when that resume claims the job between the read that saw it
    idle and the Retry, the Retry meets the running run: 409 already_generating, as the
    contract says. That is no failure: wait for the resumed run (a wedge still fails in
    wait_not_wedged), as many times as a job is resumed without a click."""
    first_retry_after = None
    attempts = resumes = 0
    while True:
        view = wait_not_wedged(stack, job_id)
        if view["status"] == "COMPLETED":
            if job_id not in stack.completed:
                stack.completed.append(job_id)
            return first_retry_after
        assert attempts < MAX_RETRIES, f"job {job_id} not COMPLETED after {MAX_RETRIES} retries"
        response = stack.request("POST", f"/api/jobs/{job_id}/generate")
        if first_retry_after is None:
            first_retry_after = time.monotonic() - stack.database_back_at
        # The items a run asks for now, whichever run it is (the Retry's or a resume).
        items = zip(stack.jobs[job_id], view["items"], strict=True)
        asked = [t for t, i in items if i["status"] != "DONE"]
        if response is not None and _already_generating(response) and resumes < RESUMES:
            resumes += 1
            ledger.asked(asked, None)
            continue
        assert response is not None and response.status_code == 202, (
            f"Retry of job {job_id} refused after the faults: "
            f"{None if response is None else (response.status_code, response.text[:300])}"
        )
        attempts += 1
        ledger.asked(asked, None)


def _already_generating(response: requests.Response) -> bool:
    """409 already_generating: another run (a resume) claimed the job first."""
    if response.status_code != 409:
        return False
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return bool(response.json()["error"]["code"] == "already_generating")
    return False


def new_job(stack: FaultStack, step: Step, tag: str) -> int:
    """A new job of ``step.items`` unique texts."""
    texts = unique_texts(tag, step.items)
    job = stack.must(
        "POST", "/api/jobs", {"title": f"faults {tag}", "voice": "alloy", "items": texts}
    )
    stack.jobs[int(job["id"])] = texts
    return int(job["id"])


def run_step(stack: FaultStack, ledger: Ledger, step: Step, tag: str) -> str:
    """Start the step's operation, inject its fault, wait for everything to end and
    heal what the fault broke; a note for the summary."""
    operation = step.operation
    if operation in ("regenerate", "render") and not stack.completed:
        operation = "run"  # nothing finished yet to act on
    step = replace(step, operation=operation)
    # A render or an export ends within a fraction of a second: its lost acknowledgements
    # are armed before it starts, to meet its final write.
    armed_first = step.fault == "lost_acks" and operation in ("render", "export")
    if armed_first:
        inject(stack, step)
    dropped = stack.proxy.stats.acks_dropped
    job_id = start_operation(stack, ledger, step, tag)
    time.sleep(step.delay)
    if not armed_first:
        inject(stack, step)
    if operation == "cancel":
        if step.fault == "lost_acks":  # between a finish's lost acknowledgement and its retry
            wait_for_lost_ack(stack, dropped)
        stack.request("POST", f"/api/jobs/{job_id}/cancel")  # 409 if it ended already
    after_fault(stack, step)
    if operation in ("render", "export"):
        status = settle_output(stack, operation)
        calm(stack)
        return status
    wait_not_wedged(stack, job_id)
    calm(stack)
    retry_after = heal(stack, ledger, job_id)
    if retry_after is None:
        return f"{operation} job {job_id}: COMPLETED without a Retry"
    return f"{operation} job {job_id}: COMPLETED; Retry accepted {retry_after:.1f}s after the db"


def start_operation(stack: FaultStack, ledger: Ledger, step: Step, tag: str) -> int:
    """Start the step's operation; the job it acts on (0 for an export)."""
    operation = step.operation
    if operation in ("run", "cancel"):
        job_id = new_job(stack, step, tag)
        stack.must("POST", f"/api/jobs/{job_id}/generate")
        ledger.asked(stack.jobs[job_id], step)
        return job_id
    if operation == "regenerate":
        job_id = stack.completed[-1]
        stack.must("POST", f"/api/jobs/{job_id}/regenerate")
        ledger.asked(stack.jobs[job_id], step)
        return job_id
    if operation == "render":
        job_id = stack.completed[-1]
        render = stack.must("POST", f"/api/jobs/{job_id}/renders", {"format": "mp3"})
        stack.renders.append((job_id, int(render["id"])))
        return job_id
    export = stack.must("POST", "/api/exports")
    stack.exports.append(int(export["id"]))
    return 0


def settle_output(stack: FaultStack, operation: str) -> str:
    """Wait until the newest render or export is no longer RUNNING; its status."""
    if operation == "render":
        job_id, render_id = stack.renders[-1]
        path = f"/api/jobs/{job_id}/renders/{render_id}"
    else:
        path = f"/api/exports/{stack.exports[-1]}"
    deadline = time.monotonic() + SETTLE
    while True:
        view = stack.must("GET", path)
        if view["status"] != "RUNNING":
            return f"{operation} {path}: {view['status']} {view.get('error_message') or ''}"
        assert time.monotonic() < deadline, f"{path} still RUNNING after {SETTLE:g} s"
        time.sleep(0.2)


@pytest.mark.parametrize(("seed", "steps"), seeds_to_run(), ids=lambda n: str(n))
def test_fault_schedule_keeps_every_promise(
    stack: FaultStack, seed: int, steps: int, chaos_report: ChaosReport
) -> None:
    schedule = make_schedule(seed, steps)
    db = FaultDatabase(stack.url)
    ledger = Ledger()
    before = Usage.now(stack)
    checks = Checks(f"FAULT_SEEDS={seed}")
    for number, step in enumerate(schedule, start=1):
        row = chaos_report.add(
            Row(
                run=f"faults seed {seed} #{number}",
                fault=step.describe(),
                moment=f"{step.delay:.2f}s",
            )
        )
        started = time.monotonic()
        try:
            row.note = run_step(
                stack, ledger, step, f"s{seed}-{number}-{int(time.time() * 1000) % 10**8}"
            )
            objects = check_objects(checks, db, stack)
            peak = check_peak(checks, stack)
            check_calls(checks, stack, dict(ledger.sends), dict(ledger.database_faults))
            billing = check_billing(checks, before, Usage.now(stack))
        except AssertionError as exc:
            row.result = "FAIL"
            log = stack.server.log_text(6000)
            raise AssertionError(
                f"step {number} failed: {exc}\n{describe(seed, schedule)}\n--- log ---\n{log}"
            ) from exc
        row.recovery_s = time.monotonic() - started
        row.checks = checks.passed
        row.result = "ok"
        row.note += f"; {objects} objects, peak {peak}, {billing}"
    try:
        summary = check_run_events_delivered(checks, db, stack.receiver, list(stack.jobs), 30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{describe(seed, schedule)}") from exc
    chaos_report.figures[f"faults seed {seed}"] = (
        f"{len(schedule)} steps, {checks.passed} checks; webhooks: {summary}; "
        f"proxy: {stack.proxy.stats}"
    )
