"""One randomized crash run of test_chaos_crash_runs.py: create a job, generate it (or
regenerate it, or generate after edits of its lines), SIGKILL the server or a worker at a
seeded moment, wait for the recovery, retry until COMPLETED and check the invariants
from outside; the run's row of the chaos summary is filled in as it goes.
"""

from __future__ import annotations

import threading
import time

from tests.support.fake_provider import fake_audio
from tests.support.server import Job

from .chaos_helpers import MAX_RETRIES, new_tag, unique_texts
from .crash_steps import (
    KILL_ALL_WORKERS,
    KILL_OTHER_WORKER,
    KILL_SERVER,
    CrashContext,
    edit_lines,
    kill,
    restart_after_server_kill,
    restore_first_take,
)
from .harness import (
    AUTO_RECOVERED,
    ITEM_CONCURRENCY,
    SERVER_KILL_RECOVERY_BUDGET,
    SETTLE_TIMEOUT,
    WORKER_DEAD_SECONDS,
    WORKER_KILL_RECOVERY_BUDGET,
    Checks,
    Row,
    check_completed_job,
    done_texts,
    job_files,
    job_summary,
    parse_ts,
    temp_files,
    worker_pid,
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
