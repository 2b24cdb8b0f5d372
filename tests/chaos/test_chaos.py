"""Issue 5's chaos suite: real gunicorn processes on PostgreSQL, killed, frozen, cut off
from their database, fed a misbehaving provider and an unwritable disk.

After every fault the invariants of docs/DESIGN are checked from outside (API, tables,
storage directory, the fake provider's bill): no job left GENERATING, every run has a
history row and none stays RUNNING, the audio of every item is the provider's bytes for
its text, and no item is paid for again once it was DONE.

Some crash runs kill the Generate that follows edits of a job's lines, and restore a take
after the retries. The crash runs are randomized from one seed (printed; replay with
CHAOS_SEED=N).
"""

from __future__ import annotations

import contextlib
import random
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests.support.fake_provider import fake_audio
from tests.support.server import (
    ApiClient,
    GunicornServer,
    Job,
    cli,
    group_pids,
    runs_changed_by_zombie,
    wait_until,
)
from tests.support.webhook_receiver import Receiver

from .chaos_provider import Answer, ChaosFakeProvider
from .conftest import FAKE_API_KEY, Spawn
from .harness import (
    AUTO_RECOVERED,
    FROZEN_RECOVERY_BUDGET,
    ITEM_CONCURRENCY,
    JOB_EVENTS,
    PROVIDER_CONCURRENCY,
    SERVER_KILL_RECOVERY_BUDGET,
    SETTLE_TIMEOUT,
    THREADS,
    TTS_MAX_ATTEMPTS,
    TTS_TIMEOUT_SECONDS,
    WORKER_DEAD_SECONDS,
    WORKER_KILL_RECOVERY_BUDGET,
    WORKERS,
    ChaosReport,
    Checks,
    Database,
    Observer,
    Row,
    billing_marks,
    chaos_env,
    check_completed_job,
    check_jobs_health,
    check_ledger,
    check_run_events_delivered,
    done_texts,
    ensure_pg_running,
    env_int,
    job_files,
    job_summary,
    local_cluster,
    parse_ts,
    temp_files,
    wait_pg,
    worker_pid,
)

N_RUNS = env_int("CHAOS_RUNS", 15)
CRASH_RUNS_BUDGET = max(200.0, 8.0 * N_RUNS)
# After the last run: a delivery held by a killed worker goes out again within
# WORKER_DEAD_SECONDS; the rest is the senders' polls and retries.
WEBHOOK_DELIVERY_BUDGET = 30.0  # seconds for all the crash runs (~2.3 s each)
MAX_RETRIES = 3
KILL_SERVER = "kill-server"
KILL_JOB_WORKER = "kill-job-worker"
KILL_ALL_WORKERS = "kill-all-workers"
KILL_OTHER_WORKER = "kill-other-worker"
WORDS = (
    "amber", "basalt", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo",
    "juniper", "kelp", "lagoon", "meadow", "nickel", "onyx", "pumice", "quartz", "river",
    "sierra", "tundra", "umber", "violet", "willow", "xenon", "yarrow",
)  # fmt: skip


def unique_texts(rng: random.Random, tag: str, n: int) -> list[str]:
    """Texts no other run uses, so the fake's per-text counters tell items apart."""
    return [
        f"{tag} item {k:02d}: {rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(WORDS)}."
        for k in range(n)
    ]


def new_tag(prefix: str) -> str:
    """A tag unique across sessions that share the fake (one fake per test anyway)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def with_log(exc: BaseException, *servers: GunicornServer | None) -> AssertionError:
    """An AssertionError carrying the servers' log tails."""
    logs = "".join(
        f"\n--- log of {s.name} (tail) ---\n{s.log_text(6000)}" for s in servers if s is not None
    )
    return AssertionError(f"{exc}{logs}")


# --------------------------------------------------------------------------------------------
# 1. randomized crash runs
# --------------------------------------------------------------------------------------------
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


def one_crash_run(ctx: CrashContext, index: int, kind: str) -> None:
    """Create a job, generate, SIGKILL at a random moment, recover, retry, check."""
    rng = ctx.rng
    obs = ctx.obs
    n = rng.randint(6, 15)
    ctx.fake.latency = rng.uniform(0.05, 0.15)
    tag = new_tag(f"r{index:02d}")
    texts = unique_texts(rng, tag, n)
    in_generate = kind in (KILL_SERVER, KILL_ALL_WORKERS) and rng.random() < 0.2
    # Mostly mid-job; sometimes late (the last items in flight, or between the last DONE and
    # the end of the run); the jitter lands the kill between the API's progress stamps.
    late = rng.random() < 0.25
    target = rng.randint(n - ITEM_CONCURRENCY, n - 1) if late else rng.randint(0, n - 4)
    jitter = rng.uniform(0.0, 0.05 if late else 0.1)
    # Sometimes the killed run is a regenerate of a COMPLETED job (every item sent again),
    # or the Generate after edits of some of its lines (only those are sent).
    regen = not in_generate and rng.random() < 0.2
    edits = not in_generate and not regen and rng.random() < 0.25
    edited = sorted(rng.sample(range(n), max(4, n // 2))) if edits else []
    if edits:
        target = n - len(edited) + rng.randint(0, len(edited) - 3)
    killed_attempt = 2 if regen or edits else 1
    mode = "regen " if regen else f"edit {len(edited)} " if edits else ""
    moment = (
        f"in POST generate +{jitter * 250:.0f}ms"
        if in_generate
        else (f"{mode}done>={target} +{jitter * 1000:.0f}ms")
    )
    checks = Checks(f"seed={ctx.seed} run=r{index:02d} {kind} {moment} n={n}")
    obs.context = checks.context
    row = ctx.report.add(Row(run=f"r{index:02d}", fault=kind, moment=moment))

    job_id = int(obs.create_job(texts, title=tag)["id"])
    ctx.job_ids.append(job_id)
    observed: Job | None
    posted: list[int | None] = []
    original: dict[int, str] = {}  # an edited line's position: the text it had
    if in_generate:
        # Kill while the claim is being made or answered: the claim may or may not commit.
        observed = obs.read(job_id)

        def post() -> None:
            response = obs.request("POST", f"/api/jobs/{job_id}/generate")
            posted.append(None if response is None else response.status_code)

        poster = threading.Thread(target=post, name="chaos-generate")
        poster.start()
        time.sleep(jitter / 4)
    else:
        if regen:
            checks.check("first generate 202", obs.generate(job_id).status_code == 202)
            obs.settled(job_id, SETTLE_TIMEOUT, "first run before the regenerate")
            obs.forget(texts)  # a regenerate pays again for every item, on purpose
            response = obs.request("POST", f"/api/jobs/{job_id}/regenerate")
            assert response is not None
        else:
            if edits:
                checks.check("first generate 202", obs.generate(job_id).status_code == 202)
                obs.settled(job_id, SETTLE_TIMEOUT, "first run before the edits")
                original = edit_lines(obs, checks, job_id, texts, edited)
            response = obs.generate(job_id)
        checks.check("claim 202", response.status_code == 202, response.text[:300])
        checks.check(
            "claim is the expected attempt",
            response.json()["attempt"] == killed_attempt,
            response.json(),
        )
        observed = obs.wait(
            job_id,
            lambda j: j["progress"]["done"] >= target or j["status"] != "GENERATING",
            SETTLE_TIMEOUT,
            f"{target} items DONE",
            interval=0.02,
        )
        time.sleep(jitter)
    assert observed is not None
    done_before = done_texts(observed)
    job_pid = worker_pid(observed)
    if regen or edits:
        checks.check(
            "during a regenerate every item keeps an audio_url (old audio until replaced)",
            all(i["audio_url"] for i in observed["items"]),
            job_summary(observed),
        )

    t_kill = time.monotonic()
    killed = kill(ctx, kind, job_pid, checks)
    t_kill_wall = time.time()
    calls_at_kill = ctx.fake.calls_for(texts)
    row.calls_before = calls_at_kill
    if in_generate:
        poster.join(15)
        checks.check("the generate call returned", not poster.is_alive())
        checks.check("generate answered 202 or not at all", posted in ([202], [None]), posted)
    if kind == KILL_SERVER:
        restart_after_server_kill(ctx, checks)

    bystander = kind == KILL_OTHER_WORKER
    budget = SERVER_KILL_RECOVERY_BUDGET if kind == KILL_SERVER else WORKER_KILL_RECOVERY_BUDGET
    if kind == KILL_ALL_WORKERS:
        # No process is left to notice the dead run until the master's respawn has loaded
        # the app, which takes as long as the machine's load makes it: the budget counts
        # from whichever comes later, the run's dead time or that respawn.
        ctx.server.wait_for_workers(exclude=set(killed), timeout=30)
        respawn = time.monotonic() - t_kill
        budget += max(0.0, respawn - WORKER_DEAD_SECONDS)
    settled = obs.settled(
        job_id, SETTLE_TIMEOUT if bystander else budget - (time.monotonic() - t_kill), "recovery"
    )
    settle_s = time.monotonic() - t_kill
    if kind != KILL_SERVER:
        ctx.server.wait_for_workers(exclude=set(killed), timeout=20)
        checks.check("the master survived its workers' death", ctx.server.alive)

    # -- the killed run's outcome ---------------------------------------------------------
    runs = settled["runs"]
    checks.check("DONE items survive the crash", done_before <= done_texts(settled), settled)
    checks.check(
        "no item GENERATING after the run ended",
        settled["progress"]["generating"] == 0,
        job_summary(settled),
    )
    if regen:
        checks.check(
            "the first run stays COMPLETED in the history",
            runs[0]["attempt"] == 1 and runs[0]["outcome"] == "COMPLETED",
            job_summary(settled),
        )
        for item in settled["items"]:  # nothing lost: old or new audio, always intact
            response = obs.audio(item["audio_url"]) if item["audio_url"] else None
            checks.check(
                "after a crashed regenerate every item still serves its audio",
                response is not None
                and response.status_code == 200
                and response.content == fake_audio(item["text"]),
                (item, None if response is None else response.status_code),
            )
    if edits:
        for position, item in enumerate(settled["items"]):  # the old audio until replaced
            response = obs.audio(item["audio_url"]) if item["audio_url"] else None
            heard = {fake_audio(item["text"])}
            if item["status"] != "DONE":
                heard.add(fake_audio(original.get(position, item["text"])))
            checks.check(
                "after a crashed run of edits every line still serves its audio",
                response is not None and response.status_code == 200 and response.content in heard,
                (item, None if response is None else response.status_code),
            )
    if bystander:
        checks.check(
            "a bystander kill does not touch the job",
            settled["status"] == "COMPLETED"
            and [(r["attempt"], r["outcome"]) for r in runs]
            == [(a, "COMPLETED") for a in range(1, killed_attempt + 1)],
            job_summary(settled),
        )
        label = "ran through"
    elif not runs:
        checks.check(
            "no run row: the claim never committed",
            in_generate and settled["status"] == "PENDING" and settled["attempt"] == 0,
            job_summary(settled),
        )
        label = "claim lost"
    else:
        first = runs[-1]
        checks.check(
            "no run after the killed one yet",
            len(runs) == killed_attempt and first["attempt"] == killed_attempt,
            runs,
        )
        if first["outcome"] == "RECOVERED":
            checks.check(
                "recovered because its worker stopped heartbeating",
                (first["error_message"] or "").startswith(AUTO_RECOVERED)
                and "stopped heartbeating" in (first["error_message"] or "")
                and (
                    settled["status"] == "COMPLETED"
                    or (settled["error_message"] or "").startswith(AUTO_RECOVERED)
                ),
                job_summary(settled),
            )
            checks.check(
                "recovered job FAILED, or COMPLETED when every item was DONE",
                settled["status"] == "FAILED"
                or (settled["status"] == "COMPLETED" and settled["progress"]["error"] == 0),
                job_summary(settled),
            )
            checks.check("recovered within the budget", settle_s <= budget, (settle_s, budget))
            row.recovery_s = settle_s
            ctx.recovery.setdefault(kind, []).append(settle_s)
            label = "recovered"
        elif in_generate and parse_ts(first["started_at"]) >= t_kill_wall - 0.05:
            # The killed workers had not accepted the POST yet: it waited in the listening
            # socket's backlog and a respawned worker claimed and ran the job.
            checks.check(
                "a claim made after the kill runs to completion",
                first["outcome"] == "COMPLETED" and settled["status"] == "COMPLETED",
                (first, t_kill_wall),
            )
            label = "claimed after the kill by a respawned worker"
        else:
            checks.check(
                "a killed run that was not recovered had completed before the kill",
                first["outcome"] == "COMPLETED"
                and first["finished_at"]
                and parse_ts(first["finished_at"]) <= t_kill_wall + 0.05,
                (first, t_kill_wall),
            )
            label = "finished before the kill"

    # -- retry until COMPLETED --------------------------------------------------------------
    job = settled
    retries = 0
    while job["status"] != "COMPLETED":
        checks.check("retries bounded", retries < MAX_RETRIES, job_summary(job))
        checks.check("job retryable", job["status"] in ("FAILED", "PENDING"), job_summary(job))
        response = obs.generate(job_id)
        checks.check(
            "retry claimed: 202 at the next attempt",
            response.status_code == 202 and response.json()["attempt"] == job["attempt"] + 1,
            response.text[:300],
        )
        job = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        checks.check(
            "retry run COMPLETED", job["runs"][-1]["outcome"] == "COMPLETED", job_summary(job)
        )
        retries += 1
    again = obs.generate(job_id)
    checks.check(
        "a COMPLETED job has nothing to generate (409)",
        again.status_code == 409 and again.json()["error"]["code"] == "nothing_to_generate",
        again.text[:300],
    )
    if edits:
        position = rng.choice(edited)
        restore_first_take(obs, checks, job_id, texts, position, original[position])
    final = obs.read(job_id)
    checks.check("job readable", final is not None)
    assert final is not None
    check_completed_job(
        checks,
        obs,
        ctx.db,
        ctx.storage,
        final,
        texts,
        billed_once=done_before,
        paid_before=1 if regen else 0,
    )
    leftovers = temp_files(ctx.storage / "jobs" / str(job_id))
    referenced = {i["audio_url"] for i in final["items"]}
    orphans = len(job_files(ctx.storage, job_id)) - len(referenced)
    row.calls_after = ctx.fake.calls_for(texts)
    row.checks = checks.passed
    row.result = "ok"
    row.note = (
        f"{label}; n={n} done@kill={len(done_before)} retries={retries}"
        + (f" generate->{posted[0] or 'no answer'}" if in_generate else "")
        + (f" orphan-files={orphans}" if orphans else "")
        + (f" tmp-files={len(leftovers)}" if leftovers else "")
    )


def test_randomized_crash_runs(
    chaos_db: tuple[str, str],
    fake: ChaosFakeProvider,
    spawn: Spawn,
    tmp_path: Path,
    chaos_seed: int,
    chaos_report: ChaosReport,
) -> None:
    """26 seeded runs: SIGKILL the server or workers mid-job, recover, retry, check it all;
    a webhook receiver is told of every run that ended, despite the kills."""
    url, token = chaos_db
    rng = random.Random(chaos_seed)
    kinds = plan_kinds(rng, N_RUNS)
    storage = tmp_path / "audio"
    env = chaos_env(url, fake.url, storage)
    server = spawn(env, name="crash-1")
    receiver = Receiver()
    api = ApiClient(server.base_url, token)
    created = api.request("POST", "/api/webhooks", {"url": receiver.url, "events": JOB_EVENTS})
    assert created.status_code == 201, created.text[:300]
    receiver.secret = created.json()["secret"]
    ctx = CrashContext(
        rng=rng,
        seed=chaos_seed,
        env=env,
        token=token,
        fake=fake,
        db=Database(url),
        storage=storage,
        spawn=spawn,
        server=server,
        obs=Observer(api, fake, f"seed={chaos_seed}"),
        report=chaos_report,
    )
    try:
        crash_runs(ctx, kinds, receiver)
    finally:
        # The database is the folder's: the other tests' runs are not told to a receiver
        # that is gone.
        with contextlib.suppress(requests.RequestException):
            ctx.obs.api.request("DELETE", f"/api/webhooks/{created.json()['id']}")
        receiver.stop()


def crash_runs(ctx: CrashContext, kinds: list[str], receiver: Receiver) -> None:
    """The crash runs one after the other, then the checks over all of them."""
    chaos_seed, fake, chaos_report = ctx.seed, ctx.fake, ctx.report
    print(f"\ncrash runs: CHAOS_SEED={chaos_seed} kinds={kinds}")
    chaos_report.figures["knobs"] = (
        f"WORKER_DEAD={WORKER_DEAD_SECONDS:g}s TTS_TIMEOUT={TTS_TIMEOUT_SECONDS:g}s "
        f"MAX_ATTEMPTS={TTS_MAX_ATTEMPTS} ITEM_CONCURRENCY={ITEM_CONCURRENCY} "
        f"PROVIDER_CONCURRENCY={PROVIDER_CONCURRENCY} "
        f"gunicorn {WORKERS}x{THREADS}, {N_RUNS} crash runs"
    )
    started = time.monotonic()
    for index, kind in enumerate(kinds, start=1):
        elapsed = time.monotonic() - started
        assert elapsed < CRASH_RUNS_BUDGET, (
            f"seed={chaos_seed}: {index - 1} runs took {elapsed:.0f} s, over the budget"
        )
        try:
            one_crash_run(ctx, index, kind)
        except BaseException as exc:
            chaos_report.rows[-1].result = "FAIL"
            if isinstance(exc, AssertionError):
                raise with_log(exc, ctx.server) from exc
            raise
    wall = time.monotonic() - started
    checks = Checks(f"seed={chaos_seed} all crash runs")
    check_jobs_health(checks, ctx.db, ctx.job_ids)
    checks.check("no 5xx over all the runs", not ctx.obs.server_errors, ctx.obs.server_errors)
    peak = fake.stats()["max_in_flight"]
    checks.check(
        "calls in flight never above PROVIDER_CONCURRENCY, dead holders' slots included",
        peak <= PROVIDER_CONCURRENCY,
        peak,
    )
    chaos_report.figures["webhooks"] = check_run_events_delivered(
        checks, ctx.db, receiver, ctx.job_ids, timeout=WEBHOOK_DELIVERY_BUDGET
    )
    for kind, values in sorted(ctx.recovery.items()):
        values.sort()
        chaos_report.figures[f"recovery s after {kind}"] = (
            f"n={len(values)} min={values[0]:.2f} median={values[len(values) // 2]:.2f} "
            f"max={values[-1]:.2f}"
        )
    chaos_report.figures["crash runs"] = (
        f"{len(kinds)} runs in {wall:.1f} s, {ctx.restarts} server restarts, "
        f"{fake.total_calls()} provider calls for "
        f"{sum(len(db_items) for db_items in map(ctx.db.items, ctx.job_ids))} items, "
        f"statuses {dict(ctx.obs.statuses)}"
    )
    chaos_report.add(
        Row(run="crash-all", fault="tables after all runs", checks=checks.passed, result="ok")
    )


# --------------------------------------------------------------------------------------------
# 2. SIGSTOP: a frozen server is fenced when it wakes up
# --------------------------------------------------------------------------------------------
def test_sigstop_zombie_changes_nothing(
    chaos_db: tuple[str, str],
    fake: ChaosFakeProvider,
    spawn: Spawn,
    tmp_path: Path,
    chaos_seed: int,
    chaos_report: ChaosReport,
) -> None:
    """A runs a job, is frozen; B recovers and completes it; A wakes and must change nothing."""
    url, token = chaos_db
    rng = random.Random(chaos_seed + 2)
    storage = tmp_path / "audio"
    env = chaos_env(url, fake.url, storage)
    db = Database(url)
    fake.latency = 0.15
    server_a = spawn(env, name="a")
    server_b = spawn(env, name="b")
    checks = Checks(f"seed={chaos_seed} sigstop")
    obs_b = Observer(ApiClient(server_b.base_url, token), fake, checks.context)
    obs_a = Observer(ApiClient(server_a.base_url, token), fake, checks.context + " (A)")
    texts = unique_texts(rng, new_tag("sigstop"), 15)
    row = chaos_report.add(Row(run="sigstop", fault="SIGSTOP A, B recovers, SIGCONT A"))
    try:
        job_id = int(obs_b.create_job(texts, title="sigstop")["id"])
        claimed = obs_a.generate(job_id)  # A claims: A runs it
        checks.check("A claims attempt 1", claimed.status_code == 202, claimed.text[:300])
        target = rng.randint(2, 6)
        jitter = rng.uniform(0.0, 0.15)
        row.moment = f"done>={target} +{jitter * 1000:.0f}ms"
        mid = obs_b.wait(
            job_id,
            lambda j: j["progress"]["done"] >= target or j["status"] != "GENERATING",
            SETTLE_TIMEOUT,
            f"{target} items DONE",
            interval=0.02,
        )
        checks.check("still running when frozen", mid["status"] == "GENERATING", job_summary(mid))
        checks.check("A runs it", worker_pid(mid) in server_a.worker_pids(), mid["lease"])
        time.sleep(jitter)

        t_stop = time.monotonic()
        server_a.freeze()
        calls_at_freeze = fake.calls_for(texts)
        row.calls_before = calls_at_freeze
        frozen = obs_b.read(job_id)
        assert frozen is not None
        done_before = done_texts(frozen)

        obs_b.phase = "frozen"
        recovered = obs_b.settled(job_id, FROZEN_RECOVERY_BUDGET, "recovery of the frozen run")
        row.recovery_s = time.monotonic() - t_stop
        obs_b.phase = "normal"
        slowest_read = obs_b.slowest.get("frozen", 0.0)
        checks.check(
            "reads never wait long for a row the frozen process holds (lock_timeout 2 s)",
            slowest_read <= 5.0,
            slowest_read,
        )
        checks.check("no 5xx while A is frozen", not obs_b.server_errors, obs_b.server_errors)
        checks.check(
            "frozen run RECOVERED (worker stopped heartbeating)",
            recovered["status"] in ("FAILED", "COMPLETED")
            and recovered["runs"][-1]["outcome"] == "RECOVERED"
            and "stopped heartbeating" in (recovered["runs"][-1]["error_message"] or ""),
            job_summary(recovered),
        )
        checks.check(
            "DONE items kept", done_before <= done_texts(recovered), job_summary(recovered)
        )
        final = recovered
        if recovered["status"] != "COMPLETED":
            retry = obs_b.generate(job_id)
            checks.check(
                "B claims attempt 2",
                retry.status_code == 202 and retry.json()["attempt"] == 2,
                retry.text[:300],
            )
            final = obs_b.settled(job_id, SETTLE_TIMEOUT, "B's retry finished")
        checks.check("B completes it", final["status"] == "COMPLETED", job_summary(final))

        # Everything A could overwrite, as it is before A wakes up.
        before_items = {i["id"]: i for i in final["items"]}
        before_audio = {}
        for item in final["items"]:
            response = obs_b.audio(item["audio_url"])
            assert response is not None and response.status_code == 200, item
            before_audio[item["id"]] = response.content
        before_rows = db.items(job_id)
        before_files = {k: (storage / k).read_bytes() for k in job_files(storage, job_id)}
        counts_before_cont = fake.counts()
        calls_before_cont = fake.calls_for(texts)

        server_a.signal_group(signal.SIGCONT)
        t_cont = time.monotonic()
        # Let A's threads get their answers or time out, meet the fence and stop.
        time.sleep(TTS_TIMEOUT_SECONDS + 2.0)
        wait_until(lambda: fake.in_flight() == 0, 10, what="no provider call in flight")
        zombie_calls = fake.calls_for(texts) - calls_before_cont
        row.calls_after = fake.calls_for(texts)

        checks.check("A survives SIGCONT", server_a.alive)
        for reader in (obs_b, obs_a):  # A is alive again and must read the same thing
            after = reader.read(job_id)
            checks.check("job readable after SIGCONT", after is not None)
            assert after is not None
            checks.check(
                "job unchanged: status, attempt",
                (after["status"], after["attempt"]) == (final["status"], final["attempt"]),
                (job_summary(after), job_summary(final)),
            )
            # Its one allowed write: giving back the reservation of a call it never sent.
            changed_runs = runs_changed_by_zombie(after["runs"], final["runs"])
            checks.check("runs unchanged but for refunds", not changed_runs, changed_runs)
            for item in after["items"]:
                was = before_items[item["id"]]
                changed = {
                    k: (was[k], item[k])
                    for k in ("status", "audio_url", "error_message", "updated_at")
                    if was[k] != item[k]
                }
                checks.check("item unchanged by the zombie", not changed, (item["id"], changed))
                response = reader.audio(item["audio_url"])
                checks.check(
                    "audio bytes unchanged",
                    response is not None and response.content == before_audio[item["id"]],
                    item["id"],
                )
        checks.check("item rows unchanged", db.items(job_id) == before_rows, job_id)
        after_files = {k: (storage / k).read_bytes() for k in job_files(storage, job_id)}
        # Files the zombie wrote before it froze (its attempt's names, a half-written
        # temp file) are its own to delete once it meets the fence; every file the new
        # run's rows point at stays byte for byte.
        referenced = {row["audio_path"] for row in before_rows if row["audio_path"]}
        checks.check(
            "audio files of the new run unchanged, the zombie's own deleted",
            after_files == {k: v for k, v in before_files.items() if k in referenced},
            sorted(set(after_files) ^ referenced),
        )
        checks.check("no temporary file left", not temp_files(storage), temp_files(storage))
        checks.check(
            "the zombie made at most ITEM_CONCURRENCY calls after SIGCONT",
            zombie_calls <= ITEM_CONCURRENCY,
            zombie_calls,
        )
        extra = {t: fake.calls(t) - counts_before_cont.get(t, 0) for t in texts}
        check_completed_job(
            checks,
            obs_b,
            db,
            storage,
            final,
            texts,
            billed_once=done_before,
            max_calls=lambda t: len(final["runs"]) + extra[t],
            woken=extra,
        )
        fenced_logged = "run fenced" in server_a.log_text(200_000)
        row.checks = checks.passed
        row.result = "ok"
        row.note = (
            f"done@freeze={len(done_before)} zombie calls={zombie_calls} "
            f"slowest read while frozen {slowest_read:.2f}s "
            f"'run fenced' logged={fenced_logged} observed {time.monotonic() - t_cont:.1f}s"
        )
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, server_a, server_b) from exc


# --------------------------------------------------------------------------------------------
# 3. PostgreSQL restarted mid-job
# --------------------------------------------------------------------------------------------
def test_postgres_restart_mid_job(
    postgresql_to_itself: None,
    chaos_db: tuple[str, str],
    fake: ChaosFakeProvider,
    spawn: Spawn,
    tmp_path: Path,
    chaos_seed: int,
    chaos_report: ChaosReport,
) -> None:
    """Stop PostgreSQL for ~2-4 s while a job runs: the app reconnects, nothing is paid twice."""
    cluster = local_cluster()
    if cluster is None:
        pytest.skip("needs the local PostgreSQL cluster under pg_ctlcluster")
    url, token = chaos_db
    rng = random.Random(chaos_seed + 3)
    storage = tmp_path / "audio"
    env = chaos_env(url, fake.url, storage)
    db = Database(url)
    fake.latency = 0.25
    server = spawn(env, name="pg")
    checks = Checks(f"seed={chaos_seed} pg-restart")
    obs = Observer(ApiClient(server.base_url, token), fake, checks.context)
    texts = unique_texts(rng, new_tag("pg"), 24)
    outage = rng.uniform(0.5, 1.5)
    row = chaos_report.add(
        Row(run="pg-restart", fault=f"PostgreSQL down {outage:.1f}s", moment="done>=3")
    )
    try:
        job_id = int(obs.create_job(texts, title="pg restart")["id"])
        response = obs.generate(job_id)
        checks.check("generate 202", response.status_code == 202, response.text[:300])
        mid = obs.wait(job_id, lambda j: j["progress"]["done"] >= 3, SETTLE_TIMEOUT, "3 DONE")
        done_before = done_texts(mid)
        row.calls_before = fake.calls_for(texts)
        t_down = time.monotonic()
        obs.phase = "outage"
        try:
            stopped = cluster.ctl("stop")
            checks.check("pg_ctlcluster stop", stopped.returncode == 0, stopped.stderr)
            wait_pg(False, 10)
            stop_s = time.monotonic() - t_down
            down_until = time.monotonic() + outage
            while time.monotonic() < down_until:  # what the API answers meanwhile
                obs.read(job_id)
                time.sleep(0.2)
            t_start = time.monotonic()
            started = cluster.ctl("start")
            checks.check("pg_ctlcluster start", started.returncode == 0, started.stderr)
        finally:
            ensure_pg_running(cluster)
        t_up = time.monotonic()
        start_s = t_up - t_start
        reconnect_s = obs.wait_healthy(30)
        obs.phase = "normal"
        row.recovery_s = time.monotonic() - t_down
        outage_statuses = {k: v for k, v in obs.statuses.items() if k.startswith("outage")}

        settled = obs.settled(job_id, 60, "job ended after the restart")
        first_outcome = settled["runs"][0]["outcome"]
        checks.check(
            "job COMPLETED, or FAILED and retryable",
            settled["status"] in ("COMPLETED", "FAILED") and first_outcome != "RUNNING",
            job_summary(settled),
        )
        checks.check("DONE items kept", done_before <= done_texts(settled), job_summary(settled))
        job = settled
        retries = 0
        while job["status"] != "COMPLETED":
            checks.check("retries bounded", retries < MAX_RETRIES, job_summary(job))
            retry = obs.generate(job_id)
            checks.check("retry claimed", retry.status_code == 202, retry.text[:300])
            job = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
            retries += 1
        check_completed_job(checks, obs, db, storage, job, texts, billed_once=done_before)
        row.calls_after = fake.calls_for(texts)
        row.checks = checks.passed
        row.result = "ok"
        row.note = (
            f"stop {stop_s:.1f}s + down {outage:.1f}s + start {start_s:.1f}s; "
            f"app healthz 200 {reconnect_s:.1f}s later; "
            f"first run {first_outcome}; retries={retries}; during outage {outage_statuses}"
        )
        chaos_report.figures["API during the PostgreSQL outage"] = (
            f"{outage_statuses}; 5xx bodies: {obs.server_errors_in('outage')[:2]}"
        )
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, server) from exc


# --------------------------------------------------------------------------------------------
# 4 and 5. Provider faults and unwritable storage, on one shared server
# --------------------------------------------------------------------------------------------
@dataclass
class Stack:
    """One fake, one server, one storage directory for the fault scenarios."""

    url: str
    token: str
    fake: ChaosFakeProvider
    server: GunicornServer
    storage: Path
    db: Database
    seed: int
    env: dict[str, str]

    def observer(self, context: str) -> Observer:
        """A fresh observer on the server."""
        return Observer(ApiClient(self.server.base_url, self.token), self.fake, context)


@pytest.fixture(scope="module")
def stack(
    chaos_db: tuple[str, str], tmp_path_factory: pytest.TempPathFactory, chaos_seed: int
) -> Iterator[Stack]:
    """The fault scenarios' server (2 workers x 2 threads) and fake (50 ms latency)."""
    url, token = chaos_db
    directory = tmp_path_factory.mktemp("chaos-faults")
    fake = ChaosFakeProvider(latency=0.05, api_key=FAKE_API_KEY).start()
    server: GunicornServer | None = None
    try:
        env = chaos_env(url, fake.url, directory / "audio")
        server = GunicornServer(env, directory, workers=WORKERS, threads=THREADS, name="faults")
        server.start()
        yield Stack(url, token, fake, server, directory / "audio", Database(url), chaos_seed, env)
    finally:
        if server is not None:
            server.stop(graceful=False)
        fake.stop()


@dataclass(frozen=True)
class Expect:
    """What the first run does to one item: its status, its calls, its error message."""

    status: str
    calls: int
    message: str | None = None  # a substring of the item's error_message


@dataclass(frozen=True)
class Case:
    """One item of a fault scenario."""

    answers: tuple[Answer, ...]
    expect: Expect
    latency: float | None = None
    min_gap: float | None = None  # at least this long between its first two calls


def run_fault_scenario(
    stack: Stack, report: ChaosReport, name: str, fault: str, cases: list[Case]
) -> None:
    """Program the fake per item, run the job once, check each item, retry to COMPLETED."""
    checks = Checks(f"seed={stack.seed} {name}")
    obs = stack.observer(checks.context)
    rng = random.Random(f"{stack.seed}-{name}")
    texts = unique_texts(rng, new_tag(name), len(cases))
    row = report.add(Row(run=name, fault=fault, moment="first calls"))
    marks = billing_marks(stack.db, stack.fake)
    try:
        for text, case in zip(texts, cases, strict=True):
            stack.fake.program(text, *case.answers)
            if case.latency is not None:
                stack.fake.slow(text, case.latency)
        job_id = int(obs.create_job(texts, title=name)["id"])
        started = time.monotonic()
        response = obs.generate(job_id)
        checks.check("generate 202", response.status_code == 202, response.text[:300])
        # worst case of one item: 2 calls of 2 s and one capped wait; 3 items at a time
        first = obs.settled(job_id, SETTLE_TIMEOUT, "first run ended")
        row.recovery_s = time.monotonic() - started
        counts = stack.fake.counts()
        row.calls_before = sum(counts.get(t, 0) for t in texts)
        for text, case, item in zip(texts, cases, first["items"], strict=True):
            got = (item["status"], counts.get(text, 0))
            checks.check(
                f"item {item['position']} after the fault: status and calls",
                got == (case.expect.status, case.expect.calls),
                (got, case.expect, item["error_message"]),
            )
            if case.expect.message is not None:
                checks.check(
                    f"item {item['position']} error message is clear",
                    case.expect.message in (item["error_message"] or ""),
                    (item["error_message"], case.expect.message),
                )
            if case.expect.status == "DONE":
                checks.check("DONE item has audio", item["audio_url"], item)
            if case.min_gap is not None:
                arrivals = stack.fake.arrivals(text)
                gap = arrivals[1] - arrivals[0] if len(arrivals) > 1 else None
                checks.check(
                    "the retry waited as asked, within the cap",
                    gap is not None and case.min_gap <= gap <= TTS_TIMEOUT_SECONDS + 1.5,
                    (gap, case.min_gap),
                )
        errors = sum(case.expect.status == "ERROR" for case in cases)
        runs = first["runs"]
        if errors:
            checks.check(
                "job FAILED with its failed items counted, run FAILED",
                first["status"] == "FAILED"
                and f"{errors} of {len(cases)} items failed" in (first["error_message"] or "")
                and [(r["attempt"], r["outcome"]) for r in runs] == [(1, "FAILED")],
                job_summary(first),
            )
        else:
            checks.check(
                "job COMPLETED in one run",
                first["status"] == "COMPLETED"
                and [(r["attempt"], r["outcome"]) for r in runs] == [(1, "COMPLETED")],
                job_summary(first),
            )
        for text in texts:
            stack.fake.slow(text, None)
            checks.check("every programmed answer used", stack.fake.pending_answers(text) == 0)
        done_first = done_texts(first)
        final = first
        if errors:
            retry = obs.generate(job_id)
            checks.check("retry 202 attempt 2", retry.status_code == 202, retry.text[:300])
            final = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        by_text = dict(zip(texts, cases, strict=True))
        check_completed_job(
            checks,
            obs,
            stack.db,
            stack.storage,
            final,
            texts,
            billed_once=[t for t in done_first if by_text[t].expect.calls == 1],
            max_calls=lambda t: by_text[t].expect.calls + (by_text[t].expect.status == "ERROR"),
        )
        checks.check("no temporary file left", not temp_files(stack.storage))
        check_ledger(checks, stack.db, stack.fake, marks)
        row.calls_after = stack.fake.calls_for(texts)
        row.checks = checks.passed
        row.result = "ok"
        row.note = f"first run {first['status']} in {row.recovery_s:.1f}s; retry completes"
        row.recovery_s = None
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, stack.server) from exc


OK = Expect("DONE", 1)


def test_429_storm_within_the_cap_is_retried(stack: Stack, chaos_report: ChaosReport) -> None:
    """Every item's first call is a 429 asking to wait 1 s (cap: 2 s): all retried, DONE."""
    storm = Case((Answer.error(429, "slow down", retry_after="1"),), Expect("DONE", 2), None, 1.0)
    run_fault_scenario(stack, chaos_report, "429<=cap", "429 Retry-After 1s on all 6", [storm] * 6)


def test_429_above_the_cap_fails_rate_limited(stack: Stack, chaos_report: ChaosReport) -> None:
    """A 429 asking for more than the call timeout fails the item at once, as rate-limited."""
    cases = [
        Case(
            (Answer.error(429, "quota", retry_after="5"),),
            Expect("ERROR", 1, "rate limited: provider asked to wait 5 s, more than the 2 s cap"),
        ),
        Case(
            (Answer.error(429, "quota", retry_after="120"),),
            Expect("ERROR", 1, "rate limited: provider asked to wait 120 s"),
        ),
        Case((), OK),
        Case((), OK),
    ]
    run_fault_scenario(stack, chaos_report, "429>cap", "429 Retry-After 5s/120s", cases)


def test_5xx_burst_is_retried(stack: Stack, chaos_report: ChaosReport) -> None:
    """One 5xx per item is retried; two in a row exhaust MAX_ATTEMPTS with a clear message."""
    cases = [
        Case((Answer.error(status, "upstream hiccup"),), Expect("DONE", 2))
        for status in (500, 502, 503, 504, 500)
    ]
    cases.append(
        Case(
            (Answer.error(503, "overloaded"), Answer.error(503, "still overloaded")),
            Expect("ERROR", TTS_MAX_ATTEMPTS, "gave up after 2 attempts: provider answered 503"),
        )
    )
    run_fault_scenario(stack, chaos_report, "5xx-burst", "500/502/503/504 burst", cases)


def test_timeouts_fail_after_max_attempts(stack: Stack, chaos_report: ChaosReport) -> None:
    """A provider slower than the call timeout: the item fails after MAX_ATTEMPTS calls."""
    slow = TTS_TIMEOUT_SECONDS + 1.0
    cases = [
        Case((), Expect("ERROR", TTS_MAX_ATTEMPTS, "provider timed out after 2 s"), slow),
        Case((), OK),
        Case((), OK),
        Case((), OK),
    ]
    run_fault_scenario(stack, chaos_report, "timeout", f"latency {slow:g}s > timeout 2s", cases)


def test_malformed_answers(stack: Stack, chaos_report: ChaosReport) -> None:
    """Empty 200s are retried, a non-JSON 400 fails with its text, a non-JSON 500 is retried,
    a JSON 4xx fails with the provider's message, a truncated 200 is never stored as audio."""
    html = "<html><body><h1>400 Bad Request</h1>nginx proxy says no</body></html>"
    cases = [
        Case((Answer.empty_200(),), Expect("DONE", 2)),
        Case(
            (Answer.empty_200(), Answer.empty_200()),
            Expect("ERROR", 2, "gave up after 2 attempts: empty audio"),
        ),
        Case(
            (Answer.text(400, html),),
            Expect("ERROR", 1, "provider answered 400: <html><body><h1>400 Bad Request</h1>"),
        ),
        Case((Answer.text(500, "upstream exploded", "text/plain"),), Expect("DONE", 2)),
        Case(
            (Answer.error(422, "input contains unsupported characters"),),
            Expect("ERROR", 1, "provider answered 422: input contains unsupported characters"),
        ),
    ]
    run_fault_scenario(stack, chaos_report, "malformed", "empty 200, text 400/500, 422", cases)


def test_truncated_audio_is_never_stored(stack: Stack, chaos_report: ChaosReport) -> None:
    """A 200 whose body stops halfway (Content-Length says more): never a DONE item with
    half an MP3. Retried (a network failure) or failed with a clear message: both are fine,
    and the retry of the job completes with intact audio."""
    checks = Checks(f"seed={stack.seed} truncated")
    obs = stack.observer(checks.context)
    texts = unique_texts(random.Random(stack.seed), new_tag("truncated"), 3)
    row = chaos_report.add(Row(run="truncated", fault="200 with half the body", moment="first"))
    try:
        stack.fake.program(texts[0], Answer.truncated_200(texts[0]))
        job_id = int(obs.create_job(texts, title="truncated")["id"])
        checks.check("generate 202", obs.generate(job_id).status_code == 202)
        first = obs.settled(job_id, SETTLE_TIMEOUT, "first run ended")
        item = first["items"][0]
        calls = stack.fake.calls(texts[0])
        checks.check(
            "truncated answer retried to DONE, or failed clearly",
            (item["status"] == "DONE" and calls == 2)
            # A cut-off answer is a transient network fault: retried up to MAX_ATTEMPTS.
            or (item["status"] == "ERROR" and 1 <= calls <= 2 and item["error_message"]),
            (item, calls),
        )
        final = first
        if first["status"] != "COMPLETED":
            checks.check("retry 202", obs.generate(job_id).status_code == 202)
            final = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        # A cut-off answer is retried within its run: up to MAX_ATTEMPTS calls per run.
        check_completed_job(
            checks, obs, stack.db, stack.storage, final, texts,
            max_calls=lambda text: 2 * len(final["runs"]),
        )  # fmt: skip
        row.calls_after = stack.fake.calls_for(texts)
        row.checks = checks.passed
        row.result = "ok"
        row.note = f"first run: item {item['status']} {item['error_message'] or ''}"[:120]
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, stack.server) from exc


def _chattr(flag: str, path: Path) -> bool:
    try:
        result = subprocess.run(
            ["chattr", flag, str(path)], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


class StorageBreak:
    """Make the job's audio directory unwritable for root, and repair it.

    - ``immutable``: ``chattr +i`` on the directory: mkstemp fails (EPERM) while the DONE
      files in it stay readable;
    - ``file``: the directory is moved aside and a regular file takes its name: the
      writer's mkdir fails (EEXIST); DONE audio is unreadable (404) until the repair.
    """

    def __init__(self, how: str, directory: Path) -> None:
        self.how = how
        self.directory = directory
        self.aside = directory.with_name(directory.name + ".aside")
        self.broken = False

    def break_it(self) -> bool:
        """Break the storage now; False when this filesystem cannot (chattr unsupported)."""
        if self.how == "immutable":
            self.broken = _chattr("+i", self.directory)
            return self.broken
        self.directory.rename(self.aside)
        self.broken = True
        self.directory.write_bytes(b"not a directory")
        return True

    def repair(self) -> None:
        """Undo it (idempotent; runs in finally)."""
        if not self.broken:
            return
        if self.how == "immutable":
            _chattr("-i", self.directory)
        else:
            if self.directory.is_file():
                self.directory.unlink()
            if self.aside.exists():
                self.aside.rename(self.directory)
        self.broken = False


@pytest.mark.parametrize("how", ["immutable", "file"])
def test_unwritable_storage_mid_job(stack: Stack, chaos_report: ChaosReport, how: str) -> None:
    """The audio directory becomes unwritable mid-job: the remaining items fail with "could
    not store audio", DONE audio stays intact, no partial file; after the repair a retry
    completes."""
    checks = Checks(f"seed={stack.seed} storage-{how}")
    obs = stack.observer(checks.context)
    texts = unique_texts(random.Random(f"{stack.seed}{how}"), new_tag(f"storage-{how}"), 9)
    row = chaos_report.add(Row(run=f"storage-{how}", fault=f"audio dir {how}", moment="done>=2"))
    job_dir: Path | None = None
    breaker: StorageBreak | None = None
    try:
        for text in texts:
            stack.fake.slow(text, 0.3)
        job_id = int(obs.create_job(texts, title=f"storage {how}")["id"])
        job_dir = stack.storage / "jobs" / str(job_id)
        breaker = StorageBreak(how, job_dir)
        checks.check("generate 202", obs.generate(job_id).status_code == 202)
        mid = obs.wait(job_id, lambda j: j["progress"]["done"] >= 2, SETTLE_TIMEOUT, "2 DONE", 0.02)
        if not breaker.break_it():
            pytest.skip("chattr +i is not supported on this filesystem")
        # A write in flight at the break made its temporary file before it; it can neither
        # be renamed nor removed in the broken directory, and gc sweeps such files once the
        # storage is repaired (it is removed below, as gc would). No write can start one
        # after the break, which is what "no partial file" checks.
        in_flight = set(temp_files(stack.storage))
        done_before = done_texts(mid)
        row.calls_before = stack.fake.calls_for(texts)
        t_break = time.monotonic()
        broken = obs.settled(job_id, SETTLE_TIMEOUT, "run ended on broken storage")
        row.recovery_s = time.monotonic() - t_break
        statuses = {i["text"]: i for i in broken["items"]}
        failed = [i for i in broken["items"] if i["status"] == "ERROR"]
        checks.check("some items failed", failed, job_summary(broken))
        checks.check(
            "they failed clearly: could not store audio",
            all((i["error_message"] or "").startswith("could not store audio: ") for i in failed),
            [i["error_message"] for i in failed],
        )
        checks.check(
            "job FAILED, run FAILED, nothing GENERATING",
            broken["status"] == "FAILED"
            and broken["runs"][-1]["outcome"] == "FAILED"
            and broken["progress"]["generating"] == 0,
            job_summary(broken),
        )
        checks.check(
            "items DONE before the break stay DONE",
            all(statuses[t]["status"] == "DONE" for t in done_before),
            job_summary(broken),
        )
        missing_answers: list[int] = []
        for item in broken["items"]:
            if item["status"] != "DONE":
                continue
            response = obs.audio(item["audio_url"])
            checks.check(
                "DONE audio answers while the storage is broken, never a 5xx",
                response is not None and response.status_code < 500,
                (item["id"], None if response is None else response.status_code),
            )
            assert response is not None
            if how == "immutable":
                checks.check(
                    "DONE audio readable and intact while the directory is immutable",
                    response.status_code == 200 and response.content == fake_audio(item["text"]),
                    (item["id"], response.status_code),
                )
            else:
                # The files are unreachable: never served as audio. (The status is checked by
                # test_audio_file_missing_on_disk_answers_404, which shows an app bug.)
                checks.check(
                    "unreachable DONE audio is not served as audio",
                    response.content != fake_audio(item["text"])
                    and not response.headers.get("Content-Type", "").startswith("audio/"),
                    (item["id"], response.status_code, response.headers.get("Content-Type")),
                )
                missing_answers.append(response.status_code)
        partial = set(temp_files(stack.storage)) - in_flight
        checks.check("no partial file", not partial, partial)
        breaker.repair()
        for leftover in temp_files(stack.storage):
            leftover.unlink()
        names = {p.name for p in job_dir.iterdir()}
        strays = [i["id"] for i in failed if f"{i['id']}-a1.mp3" in names]
        checks.check("no audio file for the failed items", not strays, strays)

        retry = obs.generate(job_id)
        checks.check("retry after the repair 202", retry.status_code == 202, retry.text[:300])
        final = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        check_completed_job(
            checks, obs, stack.db, stack.storage, final, texts, billed_once=done_before
        )
        row.calls_after = stack.fake.calls_for(texts)
        row.checks = checks.passed
        row.result = "ok"
        row.note = (
            f"{len(failed)} of 9 failed: {failed[0]['error_message']}"
            + (
                f"; DONE audio while moved away answered {sorted(set(missing_answers))}"
                if missing_answers
                else ""
            )
            + (f"; tmp-files in flight at the break={len(in_flight)}" if in_flight else "")
        )
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, stack.server) from exc
    finally:
        if breaker is not None:
            breaker.repair()
        for text in texts:
            stack.fake.slow(text, None)


def test_unwritable_target_cleans_its_temp_file(stack: Stack, chaos_report: ChaosReport) -> None:
    """os.replace fails (a directory holds the audio file's name): that item fails with
    "could not store audio", its temporary file is removed, the others are DONE."""
    checks = Checks(f"seed={stack.seed} storage-replace")
    obs = stack.observer(checks.context)
    texts = unique_texts(random.Random(stack.seed), new_tag("storage-replace"), 5)
    row = chaos_report.add(Row(run="storage-replace", fault="rename target is a dir"))
    blocker: Path | None = None
    try:
        job = obs.create_job(texts, title="storage replace")
        job_id = int(job["id"])
        victim = job["items"][2]
        blocker = stack.storage / "jobs" / str(job_id) / f"{victim['id']}-a1.mp3"
        (blocker / "keep").mkdir(parents=True)  # non-empty: os.replace cannot remove it
        row.moment = "before generate"
        checks.check("generate 202", obs.generate(job_id).status_code == 202)
        first = obs.settled(job_id, SETTLE_TIMEOUT, "first run ended")
        item = first["items"][2]
        checks.check(
            "the item failed clearly",
            item["status"] == "ERROR"
            and (item["error_message"] or "").startswith("could not store audio: "),
            item,
        )
        checks.check(
            "the others are DONE",
            [i["status"] for i in first["items"]] == ["DONE", "DONE", "ERROR", "DONE", "DONE"],
            job_summary(first),
        )
        checks.check("temporary file removed", not temp_files(stack.storage))
        shutil.rmtree(blocker)
        blocker = None
        checks.check("retry 202", obs.generate(job_id).status_code == 202)
        final = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        done_first = done_texts(first)
        check_completed_job(
            checks, obs, stack.db, stack.storage, final, texts, billed_once=done_first
        )
        row.calls_after = stack.fake.calls_for(texts)
        row.checks = checks.passed
        row.result = "ok"
        row.note = str(item["error_message"])
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, stack.server) from exc
    finally:
        if blocker is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(blocker)


def test_audio_file_missing_on_disk_answers_404(stack: Stack, chaos_report: ChaosReport) -> None:
    """APP BUG (found by the storage chaos): when an item's audio file is missing from the
    storage (a lost shared mount, a moved directory), the audio call must answer 404 as the
    contract says; it answers 200 with a JSON error body (web/api.py item_audio)."""
    checks = Checks(f"seed={stack.seed} missing-audio")
    obs = stack.observer(checks.context)
    texts = unique_texts(random.Random(stack.seed), new_tag("missing-audio"), 2)
    row = chaos_report.add(Row(run="missing-audio", fault="audio file gone from disk"))
    moved: tuple[Path, Path] | None = None
    try:
        job_id = int(obs.create_job(texts, title="missing audio")["id"])
        checks.check("generate 202", obs.generate(job_id).status_code == 202)
        job = obs.settled(job_id, SETTLE_TIMEOUT, "job finished")
        checks.check("COMPLETED", job["status"] == "COMPLETED", job_summary(job))
        item = job["items"][0]
        audio_path = stack.db.items(job_id)[0]["audio_path"]
        source = stack.storage / audio_path
        moved = (source, source.with_name(source.name + ".aside"))
        source.rename(moved[1])
        response = obs.audio(item["audio_url"])
        assert response is not None
        row.note = f"answered {response.status_code} {response.headers.get('Content-Type')}"
        checks.check(
            "a missing audio file answers 404 not_found (contract), not 200",
            response.status_code == 404
            and response.headers.get("Content-Type", "").startswith("application/json")
            and response.json()["error"]["code"] == "not_found",
            (response.status_code, response.headers.get("Content-Type"), response.text[:200]),
        )
        row.checks = checks.passed
        row.result = "ok"
    except AssertionError:
        row.result = "FAIL (app bug)"
        raise
    finally:
        if moved is not None and moved[1].exists():
            moved[1].rename(moved[0])


# --------------------------------------------------------------------------------------------
# Spending: cancel and the budget under the same eyes
# --------------------------------------------------------------------------------------------
def test_cancel_mid_job_stops_it_and_retry_resumes(stack: Stack, chaos_report: ChaosReport) -> None:
    """Cancel while calls are in flight (through either worker): no call starts after the
    answer, the answers in flight are discarded, Retry completes, and the ledger equals
    what the provider received, the discarded calls included."""
    checks = Checks(f"seed={stack.seed} cancel")
    obs = stack.observer(checks.context)
    texts = unique_texts(random.Random(f"{stack.seed}-cancel"), new_tag("cancel"), 8)
    row = chaos_report.add(Row(run="cancel", fault="cancel mid-run", moment="calls in flight"))
    marks = billing_marks(stack.db, stack.fake)
    try:
        for text in texts:
            stack.fake.slow(text, 1.0)
        job_id = int(obs.create_job(texts, title="cancel")["id"])
        checks.check("generate 202", obs.generate(job_id).status_code == 202)
        wait_until(lambda: stack.fake.calls_for(texts) >= 2, 10, 0.02, what="calls in flight")
        response = obs.request("POST", f"/api/jobs/{job_id}/cancel")
        calls_at_answer = stack.fake.calls_for(texts)
        checks.check("cancel 200", response is not None and response.status_code == 200)
        assert response is not None
        cancelled = response.json()
        checks.check(
            "job FAILED, run CANCELLED",
            cancelled["status"] == "FAILED" and cancelled["runs"][-1]["outcome"] == "CANCELLED",
            job_summary(cancelled),
        )
        time.sleep(1.5)  # the calls in flight answer now; their answers must be discarded
        after = obs.settled(job_id, SETTLE_TIMEOUT, "cancelled run ended")
        checks.check(
            "no call started after the answer",
            stack.fake.calls_for(texts) == calls_at_answer,
            (calls_at_answer, stack.fake.calls_for(texts)),
        )
        checks.check(
            "nothing written after the answer",
            [i["status"] for i in after["items"]] == [i["status"] for i in cancelled["items"]]
            and after["progress"] == cancelled["progress"],
            (job_summary(cancelled), job_summary(after)),
        )
        check_jobs_health(checks, stack.db, [job_id])
        for text in texts:
            stack.fake.slow(text, None)
        done_before = done_texts(after)
        checks.check("retry 202", obs.generate(job_id).status_code == 202)
        final = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        check_completed_job(
            checks, obs, stack.db, stack.storage, final, texts, billed_once=done_before,
            max_calls=lambda t: 2,
        )  # fmt: skip
        check_ledger(checks, stack.db, stack.fake, marks)
        checks.check("no temporary file left", not temp_files(stack.storage))
        row.calls_before, row.calls_after = calls_at_answer, stack.fake.calls_for(texts)
        row.checks = checks.passed
        row.result = "ok"
        row.note = f"cancelled with {calls_at_answer} calls sent; retry completes"
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, stack.server) from exc


def test_budget_runs_out_then_retry_resumes(stack: Stack, chaos_report: ChaosReport) -> None:
    """A budget that pays for 3 of 6 items: the run ends OVER_BUDGET with 3 DONE and 3
    PENDING, the ledger never passes the budget and equals what the provider received;
    with the budget removed, Retry completes without paying twice."""
    checks = Checks(f"seed={stack.seed} budget")
    obs = stack.observer(checks.context)
    tag = new_tag("budget")
    texts = [f"{tag} budget item {k:02d}" for k in range(6)]  # all the same length
    row = chaos_report.add(Row(run="budget", fault="budget for 3 of 6", moment="4th call"))
    marks = billing_marks(stack.db, stack.fake)
    budget = marks[0] + 3 * len(texts[0]) + len(texts[0]) // 2
    try:
        cli(stack.env, "set-budget", "--org", "acme", "--characters", str(budget))
        job_id = int(obs.create_job(texts, title="budget")["id"])
        checks.check("generate 202", obs.generate(job_id).status_code == 202)
        first = obs.settled(job_id, SETTLE_TIMEOUT, "run over budget")
        checks.check(
            "job FAILED, run OVER_BUDGET, 3 DONE and 3 PENDING",
            first["status"] == "FAILED"
            and first["runs"][-1]["outcome"] == "OVER_BUDGET"
            and sorted(i["status"] for i in first["items"]) == ["DONE"] * 3 + ["PENDING"] * 3,
            job_summary(first),
        )
        checks.check("ledger within the budget", stack.db.ledger() <= budget, stack.db.ledger())
        check_ledger(checks, stack.db, stack.fake, marks)
        refused = obs.generate(job_id)
        checks.check(
            "a claim that cannot pay answers 409 budget_exceeded",
            refused.status_code == 409 and refused.json()["error"]["code"] == "budget_exceeded",
            refused.text[:300],
        )
        cli(stack.env, "set-budget", "--org", "acme", "--none")
        done_before = done_texts(first)
        checks.check("retry 202", obs.generate(job_id).status_code == 202)
        final = obs.settled(job_id, SETTLE_TIMEOUT, "retry finished")
        check_completed_job(
            checks, obs, stack.db, stack.storage, final, texts, billed_once=done_before
        )
        check_ledger(checks, stack.db, stack.fake, marks)
        row.checks = checks.passed
        row.result = "ok"
        row.note = "OVER_BUDGET with 3 DONE; retry after the budget is lifted completes"
    except AssertionError as exc:
        row.result = "FAIL"
        raise with_log(exc, stack.server) from exc
    finally:
        cli(stack.env, "set-budget", "--org", "acme", "--none")
