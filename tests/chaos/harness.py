"""Helpers of the chaos suite: observing a job through the API, invariant checks, the
database and storage seen from outside, PostgreSQL control, and the summary table.

Like tests/support, nothing here imports ``speechbatch``: the app is reached through its
environment, its JSON API, its database tables and its storage directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import requests

from tests.support.fake_provider import fake_audio
from tests.support.server import (
    PG_ADMIN_DSN,
    ApiClient,
    Job,
    app_env,
    pg_unreachable_reason,
)
from tests.support.webhook_receiver import Receiver

from .chaos_provider import ChaosFakeProvider

# Timing knobs of the app under test (issue 5). One item's worst case is
# MAX_ATTEMPTS x TIMEOUT + (MAX_ATTEMPTS - 1) x TIMEOUT = 6 s < LEASE_SECONDS.
WORKER_DEAD_SECONDS = 2.0
TTS_TIMEOUT_SECONDS = 2.0
TTS_MAX_ATTEMPTS = 2
LEASE_SECONDS = 30.0
ITEM_CONCURRENCY = 3
# The deployment's slots are exactly one run's worth: a run killed mid-call leaves its
# slots held by a dead worker, and the retry (or any other job) can send nothing until
# they are reclaimed, so every crash run makes a slot holder's death part of the test.
PROVIDER_CONCURRENCY = ITEM_CONCURRENCY
WORKERS = 2
THREADS = 2

# Deadlines (seconds) of the waits; every loop of the suite has one.
SETTLE_TIMEOUT = 20.0  # a run of <= 15 items at <= 150 ms, 3 at a time, with margin
WORKER_KILL_RECOVERY_BUDGET = WORKER_DEAD_SECONDS + 8.0  # includes the master's respawn
SERVER_KILL_RECOVERY_BUDGET = WORKER_DEAD_SECONDS + 14.0  # includes booting a new server
# A frozen process may hold the job's row until idle_in_transaction_session_timeout (10 s).
FROZEN_RECOVERY_BUDGET = WORKER_DEAD_SECONDS + 14.0

AUTO_RECOVERED = "auto-recovered"
WEBHOOK_RETRY_SCHEDULE = ",".join(["0.5"] * 20)
JOB_EVENTS = ("job.completed", "job.failed")


def chaos_env(database_url: str, provider_url: str, storage_dir: Path) -> dict[str, str]:
    """The environment of every app process of the chaos suite."""
    return app_env(
        database_url,
        provider_url,
        storage_dir,
        WORKER_DEAD_SECONDS=WORKER_DEAD_SECONDS,
        TTS_TIMEOUT_SECONDS=TTS_TIMEOUT_SECONDS,
        TTS_MAX_ATTEMPTS=TTS_MAX_ATTEMPTS,
        LEASE_SECONDS=LEASE_SECONDS,
        ITEM_CONCURRENCY=ITEM_CONCURRENCY,
        PROVIDER_CONCURRENCY=PROVIDER_CONCURRENCY,
        # The receiver listens on 127.0.0.1; a refused attempt is retried soon.
        WEBHOOK_ALLOW_PRIVATE="true",
        WEBHOOK_RETRY_SCHEDULE=WEBHOOK_RETRY_SCHEDULE,
    )


def job_summary(job: Job | None) -> dict[str, Any] | None:
    """The fields worth printing when an assertion about a job fails."""
    if job is None:
        return None
    return {
        "id": job.get("id"),
        "status": job.get("status"),
        "attempt": job.get("attempt"),
        "error_message": job.get("error_message"),
        "progress": job.get("progress"),
        "runs": [(r["attempt"], r["outcome"], r["error_message"]) for r in job.get("runs", [])],
        "items": [(i["position"], i["status"], i["error_message"]) for i in job.get("items", [])],
    }


def done_texts(job: Job) -> set[str]:
    """Texts of the job's DONE items."""
    return {item["text"] for item in job["items"] if item["status"] == "DONE"}


def worker_pid(job: Job) -> int | None:
    """PID of the process running the job's current run (``lease.worker`` = host:pid)."""
    worker = (job.get("lease") or {}).get("worker")
    if not worker:
        return None
    try:
        return int(str(worker).rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None


def parse_ts(value: str) -> float:
    """An API timestamp (ISO 8601 with offset) as a Unix time."""
    return datetime.fromisoformat(value).timestamp()


# --------------------------------------------------------------------------------------------
# Observing a job through the API
# --------------------------------------------------------------------------------------------
class Observer:
    """Reads jobs through the API and remembers what it saw.

    - every HTTP status the API answered (a 5xx is always a bug, outside a database outage),
    - for every item, the provider's call count for its text when the item was first seen
      DONE: any later call for that text would be a re-bill of a DONE item.
    """

    def __init__(self, api: ApiClient, fake: ChaosFakeProvider, context: str) -> None:
        self.api = api
        self.fake = fake
        self.context = context
        self.statuses: Counter[str] = Counter()
        self.server_errors: list[str] = []
        self.done_calls: dict[str, int] = {}
        self.done_seen_at: dict[str, float] = {}
        self.slowest: dict[str, float] = {}  # per phase, the slowest answered call (s)
        self._lock = threading.Lock()
        self.phase = "normal"

    def use(self, api: ApiClient) -> None:
        """Talk to another server from now on (after a restart)."""
        self.api = api

    def request(self, method: str, path: str, json: Any = None) -> requests.Response | None:
        """One API call; None on a connection error (a killed or frozen server)."""
        started = time.monotonic()
        try:
            response = self.api.request(method, path, json)
        except requests.RequestException as exc:
            with self._lock:
                self.statuses[f"{self.phase}:{type(exc).__name__}"] += 1
            return None
        elapsed = time.monotonic() - started
        with self._lock:
            self.slowest[self.phase] = max(self.slowest.get(self.phase, 0.0), elapsed)
            self.statuses[f"{self.phase}:{response.status_code}"] += 1
            if response.status_code >= 500:
                self.server_errors.append(
                    f"{self.phase}: {method} {path} -> {response.status_code} {response.text[:300]}"
                )
        return response

    def server_errors_in(self, *phases: str) -> list[str]:
        """The 5xx answers seen in ``phases`` (all phases when none given)."""
        with self._lock:
            errors = list(self.server_errors)
        if not phases:
            return errors
        return [e for e in errors if e.split(":", 1)[0] in phases]

    def read(self, job_id: int) -> Job | None:
        """GET the job; None when the server did not answer 200."""
        response = self.request("GET", f"/api/jobs/{job_id}")
        if response is None or response.status_code != 200:
            return None
        job: Job = response.json()
        self.note(job)
        return job

    def note(self, job: Job) -> None:
        """Remember the call counts of items seen DONE for the first time."""
        for item in job.get("items", []):
            if item["status"] == "DONE" and item["text"] not in self.done_calls:
                # Counted after the read: a re-bill in between goes unseen (never a false alarm).
                self.done_calls[item["text"]] = self.fake.calls(item["text"])
                self.done_seen_at[item["text"]] = time.monotonic()

    def forget(self, texts: Iterable[str]) -> None:
        """Forget the DONE sightings of ``texts`` (before an explicit regenerate)."""
        for text in texts:
            self.done_calls.pop(text, None)
            self.done_seen_at.pop(text, None)

    def wait(
        self,
        job_id: int,
        predicate: Callable[[Job], bool],
        timeout: float,
        what: str,
        interval: float = 0.05,
    ) -> Job:
        """Poll the job until ``predicate``; AssertionError with the last view at the deadline."""
        deadline = time.monotonic() + timeout
        last: Job | None = None
        while True:
            job = self.read(job_id)
            if job is not None:
                last = job
                if predicate(job):
                    return job
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"[{self.context}] job {job_id}: {what} not met within {timeout:g} s; "
                    f"last view: {job_summary(last)}; statuses: {dict(self.statuses)}"
                )
            time.sleep(interval)

    def settled(self, job_id: int, timeout: float, what: str) -> Job:
        """Wait until the job is no longer GENERATING."""
        return self.wait(job_id, lambda j: j["status"] != "GENERATING", timeout, what)

    def generate(self, job_id: int) -> requests.Response:
        """POST generate; AssertionError on a connection error."""
        response = self.request("POST", f"/api/jobs/{job_id}/generate")
        if response is None:
            raise AssertionError(f"[{self.context}] POST generate of job {job_id}: no answer")
        return response

    def create_job(self, texts: list[str], title: str) -> Job:
        """POST a job (201 expected)."""
        body = {"title": title, "voice": "alloy", "items": texts}
        response = self.request("POST", "/api/jobs", body)
        if response is None or response.status_code != 201:
            detail = None if response is None else f"{response.status_code} {response.text[:500]}"
            raise AssertionError(f"[{self.context}] POST /api/jobs failed: {detail}")
        job: Job = response.json()
        return job

    def audio(self, url: str) -> requests.Response | None:
        """GET an item's audio."""
        return self.request("GET", url)

    def wait_healthy(self, timeout: float) -> float:
        """Poll /healthz until 200; return the seconds it took."""
        start = time.monotonic()
        deadline = start + timeout
        last = "no answer"
        while True:
            try:
                response = requests.get(f"{self.api.base_url}/healthz", timeout=2)
                if response.status_code == 200:
                    return time.monotonic() - start
                last = f"{response.status_code} {response.text[:200]}"
            except requests.RequestException as exc:
                last = type(exc).__name__
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"[{self.context}] /healthz not 200 within {timeout:g} s: {last}"
                )
            time.sleep(0.1)


# --------------------------------------------------------------------------------------------
# Invariant checks
# --------------------------------------------------------------------------------------------
class Checks:
    """Named invariant checks that count how many passed; the first failure raises."""

    def __init__(self, context: str) -> None:
        self.context = context
        self.passed = 0
        self.names: list[str] = []

    def check(self, name: str, condition: object, detail: object = "") -> None:
        """Assert ``condition``; the message names the invariant and the context."""
        if not condition:
            raise AssertionError(f"[{self.context}] invariant violated: {name}: {detail}")
        self.passed += 1
        self.names.append(name)


def check_completed_job(
    checks: Checks,
    obs: Observer,
    db: Database,
    storage_root: Path,
    job: Job,
    texts: list[str],
    *,
    billed_once: Iterable[str] = (),
    max_calls: Callable[[str], int] | None = None,
    paid_before: int = 0,
    woken: Mapping[str, int] | None = None,
) -> None:
    """Every invariant of a job that must have ended COMPLETED.

    ``billed_once``: texts whose items were DONE before a fault: exactly one call in total
    (``paid_before`` + 1 when the faulty run was a regenerate of a job paid for already).
    ``max_calls(text)``: the most calls a text may have had (default: one per run).
    ``woken``: the calls per text that a frozen process made once it woke, after the job
    had ended; the caller bounds them (a thread frozen while its request was being
    written sends it on waking, whatever the fence says).
    """
    job_id = job["id"]
    runs = job["runs"]
    checks.check("job COMPLETED", job["status"] == "COMPLETED", job_summary(job))
    checks.check(
        "progress all DONE",
        job["progress"]["done"] == job["progress"]["total"] == len(texts),
        job["progress"],
    )
    checks.check(
        "items are the job's texts", [i["text"] for i in job["items"]] == texts, job_summary(job)
    )
    checks.check(
        "one history row per attempt",
        [r["attempt"] for r in runs] == list(range(1, job["attempt"] + 1)),
        (job["attempt"], [r["attempt"] for r in runs]),
    )
    checks.check(
        "no RUNNING run remains", all(r["outcome"] != "RUNNING" for r in runs), job_summary(job)
    )
    checks.check(
        "runs finished", all(r["finished_at"] for r in runs), [r["finished_at"] for r in runs]
    )
    checks.check(
        "last run COMPLETED (or RECOVERED with every item DONE)",
        runs and runs[-1]["outcome"] in ("COMPLETED", "RECOVERED"),
        job_summary(job),
    )
    # audio through the API
    for item in job["items"]:
        checks.check(
            "item DONE with audio_url", item["status"] == "DONE" and item["audio_url"], item
        )
        response = obs.audio(item["audio_url"])
        checks.check(
            "audio GET 200",
            response is not None and response.status_code == 200,
            (item, None if response is None else response.status_code),
        )
        assert response is not None
        checks.check(
            "audio content type",
            response.headers.get("Content-Type", "").startswith("audio/mpeg"),
            response.headers.get("Content-Type"),
        )
        checks.check(
            "audio bytes are the provider's for that text",
            response.content == fake_audio(item["text"]),
            (item["text"], len(response.content)),
        )
    # the database and the disk behind it
    rows = db.items(job_id)
    for row in rows:
        expected = fake_audio(row["text"])
        checks.check(
            "stored sha256/size match the audio",
            row["audio_sha256"] == hashlib.sha256(expected).hexdigest()
            and row["audio_bytes"] == len(expected),
            row,
        )
        match = re.fullmatch(rf"jobs/{job_id}/{row['id']}-a(\d+)\.mp3", row["audio_path"] or "")
        checks.check(
            "audio path carries an attempt of this job",
            match is not None and 1 <= int(match.group(1)) <= job["attempt"],
            row["audio_path"],
        )
        on_disk = storage_root / row["audio_path"]
        checks.check(
            "audio file on disk intact",
            on_disk.is_file() and on_disk.read_bytes() == expected,
            on_disk,
        )
    # billing
    counts = obs.fake.counts()
    once = set(billed_once)
    rebilled = {t: counts.get(t, 0) for t in once if counts.get(t, 0) != paid_before + 1}
    checks.check(
        "items DONE before the fault billed exactly once (by the faulty run)",
        not rebilled,
        (paid_before, rebilled),
    )
    limit = max_calls or (lambda text: len(runs))
    over = {t: (counts.get(t, 0), limit(t)) for t in texts if not 1 <= counts.get(t, 0) <= limit(t)}
    checks.check("every item billed at least once and at most its bound", not over, over)
    after_done = {
        t: (n, counts.get(t, 0))
        for t, n in obs.done_calls.items()
        if t in texts and counts.get(t, 0) - (woken or {}).get(t, 0) != n
    }
    checks.check("no call for an item after it was seen DONE", not after_done, after_done)
    checks.check("no 5xx from the API", not obs.server_errors_in("normal"), obs.server_errors)


# --------------------------------------------------------------------------------------------
# The database and the storage, seen from outside
# --------------------------------------------------------------------------------------------
def psycopg_dsn(url: str) -> str:
    """A libpq URL from a SQLAlchemy ``postgresql+psycopg://`` one."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


class Database:
    """Read-only SQL over the app's tables (for checks the API does not show)."""

    def __init__(self, url: str) -> None:
        self.dsn = psycopg_dsn(url)

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(sql, params)
            names = [c.name for c in cur.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def items(self, job_id: int) -> list[dict[str, Any]]:
        """Every item row of a job, by position."""
        return self._rows(
            "SELECT id, position, text, status, error_message, audio_path, audio_bytes,"
            " audio_sha256, updated_at FROM items WHERE job_id = %s ORDER BY position",
            (job_id,),
        )

    def ledger(self) -> int:
        """Characters billed in the ledger, every organization and month."""
        rows = self._rows("SELECT coalesce(sum(billed_characters), 0) AS n FROM usage_months", ())
        return int(rows[0]["n"])

    def jobs_health(self, job_ids: list[int]) -> list[dict[str, Any]]:
        """Per job: status, attempt, run rows, RUNNING runs, GENERATING items, and the job's
        progress counters next to its items counted per status."""
        return self._rows(
            "SELECT j.id, j.status, j.attempt,"
            " (SELECT count(*) FROM runs r WHERE r.job_id = j.id) AS runs,"
            " (SELECT count(*) FROM runs r WHERE r.job_id = j.id AND r.outcome = 'RUNNING')"
            "   AS running,"
            " (SELECT count(*) FROM items i WHERE i.job_id = j.id AND i.status = 'GENERATING')"
            "   AS generating_items,"
            " ARRAY[j.items_pending, j.items_generating, j.items_done, j.items_error] AS counters,"
            " ARRAY(SELECT count(*) FILTER (WHERE i.status = s) FROM items i,"
            "   unnest(ARRAY['PENDING', 'GENERATING', 'DONE', 'ERROR']) WITH ORDINALITY AS u(s, n)"
            "   WHERE i.job_id = j.id GROUP BY u.n ORDER BY u.n) AS real_counts"
            " FROM jobs j WHERE j.id = ANY(%s) ORDER BY j.id",
            (job_ids,),
        )

    def ended_runs(self, job_ids: list[int]) -> list[tuple[int, int, str]]:
        """(job id, attempt, outcome) of every run of these jobs that ended (each end
        leaves its job COMPLETED or FAILED, and is told)."""
        rows = self._rows(
            "SELECT job_id, attempt, outcome FROM runs WHERE job_id = ANY(%s)"
            " AND outcome <> 'RUNNING' ORDER BY job_id, attempt",
            (job_ids,),
        )
        return [(r["job_id"], r["attempt"], r["outcome"]) for r in rows]

    def job_events(self) -> list[dict[str, Any]]:
        """Every job.completed / job.failed in the outbox: message_id, type, job id, attempt."""
        rows = self._rows(
            "SELECT message_id, type, body FROM webhook_events WHERE type = ANY(%s) ORDER BY id",
            (list(JOB_EVENTS),),
        )
        events = []
        for row in rows:
            data = json.loads(row["body"])["data"]
            events.append(
                {
                    "message_id": row["message_id"],
                    "type": row["type"],
                    "job_id": data["job"]["id"],
                    "attempt": data["run"]["attempt"],
                }
            )
        return events


def check_run_events_delivered(
    checks: Checks, db: Database, receiver: Receiver, job_ids: list[int], timeout: float
) -> str:
    """Every run of these jobs that ended has its one job.* event in the outbox, and every
    such event reached the receiver at least once with a signature that verifies, despite
    the kills. Returns a one-line summary."""
    runs = db.ended_runs(job_ids)
    wanted = set(job_ids)
    events = [e for e in db.job_events() if e["job_id"] in wanted]
    told = Counter((e["job_id"], e["attempt"]) for e in events)
    untold = [r for r in runs if told[(r[0], r[1])] != 1]
    checks.check("every ended run has exactly one job.* event", not untold, untold)
    extra = set(told) - {(r[0], r[1]) for r in runs}
    checks.check("no event for a run that did not end", not extra, extra)
    expected = {e["message_id"] for e in events}
    deadline = time.monotonic() + timeout
    while True:
        verified = {r.headers.get("webhook-id") for r in list(receiver.received) if r.verified}
        missing = expected - verified
        if not missing or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    checks.check(
        "every event of an ended run delivered at least once, signature verified",
        not missing,
        sorted(missing),
    )
    received = list(receiver.received)
    unverified = [r.headers.get("webhook-id") for r in received if not r.verified]
    checks.check("every request the receiver got verifies", not unverified, unverified)
    ids = [r.headers.get("webhook-id") for r in received]
    return (
        f"{len(runs)} ended runs, {len(expected)} events, {len(ids)} requests "
        f"({len(ids) - len(set(ids))} sent again)"
    )


def received_characters(fake: ChaosFakeProvider) -> int:
    """Characters the fake provider received, every call counted (what it would bill)."""
    return sum(len(text) * n for text, n in fake.counts().items())


def check_ledger(
    checks: Checks, db: Database, fake: ChaosFakeProvider, before: tuple[int, int]
) -> None:
    """The ledger grew by exactly what the provider received since ``before``
    (``billing_marks``): every call is recorded before it is sent, and a call that was
    not sent after all was given back."""
    ledger, received = billing_marks(db, fake)
    delta = (ledger - before[0], received - before[1])
    checks.check("ledger == characters the provider received", delta[0] == delta[1], delta)


def billing_marks(db: Database, fake: ChaosFakeProvider) -> tuple[int, int]:
    """(characters in the ledger, characters the provider received) now."""
    return db.ledger(), received_characters(fake)


def check_jobs_health(checks: Checks, db: Database, job_ids: list[int]) -> None:
    """No job GENERATING, no RUNNING run, one run row per attempt: straight from the tables."""
    rows = db.jobs_health(job_ids)
    checks.check("every job is in the table", len(rows) == len(job_ids), (len(rows), job_ids))
    bad = [
        r
        for r in rows
        if r["status"] == "GENERATING"
        or r["running"]
        or r["runs"] != r["attempt"]
        or r["generating_items"]
    ]
    checks.check("no job GENERATING, no RUNNING run, a run row per attempt", not bad, bad)
    drift = [r for r in rows if list(r["counters"]) != list(r["real_counts"])]
    checks.check("progress counters equal the items' statuses", not drift, drift)


def temp_files(root: Path) -> list[Path]:
    """Temporary files of atomic writes left in the storage tree."""
    return sorted(root.rglob(".tmp-*")) if root.exists() else []


def job_files(root: Path, job_id: int) -> set[str]:
    """Storage keys of the regular files in a job's audio directory."""
    directory = root / "jobs" / str(job_id)
    if not directory.is_dir():
        return set()
    return {f"jobs/{job_id}/{p.name}" for p in directory.iterdir() if p.is_file()}


# --------------------------------------------------------------------------------------------
# PostgreSQL control (for the restart test)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cluster:
    """A local Debian PostgreSQL cluster (pg_ctlcluster VERSION NAME ...)."""

    version: str
    name: str

    def ctl(self, action: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``pg_ctlcluster --skip-systemctl-redirect VERSION NAME ACTION``."""
        return subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, action],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def local_cluster() -> Cluster | None:
    """The cluster serving PG_ADMIN_DSN when it is local and pg_ctlcluster exists."""
    match = re.match(r"postgresql://[^@/]*@?([^:/]+)(?::(\d+))?/", PG_ADMIN_DSN)
    if match is None or match.group(1) not in ("127.0.0.1", "localhost"):
        return None
    port = match.group(2) or "5432"
    try:
        out = subprocess.run(
            ["pg_lsclusters", "-h"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == port:
            return Cluster(fields[0], fields[1])
    return None


def wait_pg(up: bool, timeout: float) -> None:
    """Wait until PostgreSQL answers (``up``) or refuses."""
    deadline = time.monotonic() + timeout
    while (pg_unreachable_reason() is None) != up:
        if time.monotonic() >= deadline:
            raise AssertionError(f"PostgreSQL not {'up' if up else 'down'} within {timeout:g} s")
        time.sleep(0.1)


def ensure_pg_running(cluster: Cluster, timeout: float = 60.0) -> None:
    """Start the cluster if it does not answer, and wait for it."""
    if pg_unreachable_reason() is None:
        return
    cluster.ctl("start")
    wait_pg(True, timeout)


# --------------------------------------------------------------------------------------------
# The summary table
# --------------------------------------------------------------------------------------------
@dataclass
class Row:
    """One line of the summary: a crash run or a fault scenario."""

    run: str
    fault: str
    moment: str = ""
    recovery_s: float | None = None
    calls_before: int | None = None
    calls_after: int | None = None
    checks: int = 0
    result: str = "running"
    note: str = ""


@dataclass
class ChaosReport:
    """What the suite did, for the terminal summary and a file under the pytest tmp dir."""

    seed: int
    rows: list[Row] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def add(self, row: Row) -> Row:
        """Append a row (filled in as the run goes)."""
        self.rows.append(row)
        return row

    def render(self) -> str:
        """The table, plus figures."""
        header = ("run", "fault", "moment", "recovery s", "calls bef->aft", "checks", "result")
        lines = [
            [
                r.run,
                r.fault,
                r.moment,
                "-" if r.recovery_s is None else f"{r.recovery_s:.2f}",
                f"{'-' if r.calls_before is None else r.calls_before}->"
                f"{'-' if r.calls_after is None else r.calls_after}",
                str(r.checks),
                r.result + (f" ({shorten(r.note)})" if r.note else ""),
            ]
            for r in self.rows
        ]
        widths = [
            max(len(h), *(len(line[i]) for line in lines)) if lines else len(h)
            for i, h in enumerate(header)
        ]
        out = [
            f"chaos seed: CHAOS_SEED={self.seed}   "
            f"(replay: CHAOS_SEED={self.seed} pytest -p no:cacheprovider tests/chaos)",
            "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
            "  ".join("-" * w for w in widths),
        ]
        out += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
        recoveries = [r.recovery_s for r in self.rows if r.recovery_s is not None]
        if recoveries:
            recoveries.sort()
            out.append(
                f"recovery seconds over {len(recoveries)} faults: min {recoveries[0]:.2f}, "
                f"median {recoveries[len(recoveries) // 2]:.2f}, max {recoveries[-1]:.2f}"
            )
        passed = sum(r.checks for r in self.rows)
        failed = [r.run for r in self.rows if r.result not in ("ok",)]
        out.append(
            f"rows: {len(self.rows)}, invariant checks passed: {passed}, "
            f"rows not ok: {failed or 'none'}"
        )
        for name, value in self.figures.items():
            out.append(f"{name}: {value}")
        out.append(f"chaos wall time: {time.monotonic() - self.started:.1f} s")
        return "\n".join(out)


def shorten(text: str, width: int = 110) -> str:
    """One line of at most ``width`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def env_int(name: str, default: int) -> int:
    """An integer from the environment, or ``default``."""
    value = os.environ.get(name, "").strip()
    return int(value) if value else default
