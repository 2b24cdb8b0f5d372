"""SIGSTOP: a server frozen mid-job is fenced when it wakes up. Another server recovers
and completes the job while it is frozen; after SIGCONT the zombie must change nothing
(job, runs but for refunds, item rows, audio files and bytes) and make at most
ITEM_CONCURRENCY provider calls.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

from tests.support.server import ApiClient, runs_changed_by_zombie, wait_until

from .chaos_helpers import new_tag, unique_texts, with_log
from .chaos_provider import ChaosFakeProvider
from .conftest import Spawn
from .harness import (
    FROZEN_RECOVERY_BUDGET,
    ITEM_CONCURRENCY,
    SETTLE_TIMEOUT,
    TTS_TIMEOUT_SECONDS,
    ChaosReport,
    Checks,
    Database,
    Observer,
    Row,
    chaos_env,
    check_completed_job,
    done_texts,
    job_files,
    job_summary,
    temp_files,
    worker_pid,
)


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
