"""A render holder SIGKILLed mid-render: 409 while its lease runs, then FAILED on read, and
a new render completes.

The server is real gunicorn with one worker and the offline espeak voice (real audio).
To catch the builder mid-render, its storage reads item audio slowly
(``tests/support/slow_reads.py``). The render lease is short
(``SPEECHBATCH_RENDER_LOCK_TTL_SECONDS``), so the builder renews it every third of that.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from speechbatch.adapters.db import later
from speechbatch.adapters.repositories.job_locks import job_locks
from tests.e2e.conftest import Metric
from tests.support.render_audio import decode_all, parse_cues
from tests.support.server import ApiClient, GunicornServer, wait_until
from tests.support.slow_reads import slow_reads_server

LOCK_TTL_SECONDS = 6.0
READ_DELAY_SECONDS = 0.3
ITEMS = [f"Sentence number {n} of the book that crashes." for n in range(1, 13)]
RECOVERED_MESSAGE = "auto-recovered: render holder stopped renewing its lock"


@pytest.fixture
def server(env: dict[str, str], api_token: str, tmp_path: Path) -> Iterator[GunicornServer]:
    """One gunicorn worker with espeak, slow item reads and a short render lease."""
    server_env = {
        **env,
        "SPEECHBATCH_TTS_PROVIDER": "espeak",
        "SPEECHBATCH_TTS_VOICES": "en-us",
        "SPEECHBATCH_RENDER_LOCK_TTL_SECONDS": f"{LOCK_TTL_SECONDS:g}",
    }
    server = slow_reads_server(
        server_env, tmp_path, delay=READ_DELAY_SECONDS, workers=1, threads=4, name="render"
    )
    try:
        yield server.start()
    finally:
        server.stop(graceful=False)


def render_lock(db: Engine) -> Any:
    """The newest render lock row (typed columns: aware datetimes on both databases)."""
    with db.connect() as conn:
        return conn.execute(
            select(job_locks.c.id, job_locks.c.holder, job_locks.c.expires_at)
            .where(job_locks.c.job_type.like("render:%"))
            .order_by(job_locks.c.id.desc())
        ).first()


def set_expiry(db: Engine, lock_id: int, expires_at: Any) -> None:
    """Write a lock's expires_at: a value read before, or the database's ``later(s)``."""
    with db.begin() as conn:
        conn.execute(
            update(job_locks).where(job_locks.c.id == lock_id).values(expires_at=expires_at)
        )


def render_status(api: ApiClient, job_id: int, render_id: int) -> Any:
    """GET the render (asserts 200)."""
    response = api.request("GET", f"/api/jobs/{job_id}/renders/{render_id}")
    assert response.status_code == 200, response.text
    return response.json()


def ended(api: ApiClient, job_id: int, render_id: int, timeout: float) -> Any:
    """Poll the render until it is no longer RUNNING."""
    return wait_until(
        lambda: (body := render_status(api, job_id, render_id))["status"] != "RUNNING" and body,
        timeout=timeout,
        interval=0.2,
        what=f"render {render_id} ended",
    )


def test_sigkilled_render_is_recovered_on_read_and_a_new_render_completes(
    server: GunicornServer, api_token: str, db: Engine, metric: Metric
) -> None:
    api = ApiClient(server.base_url, api_token)
    job = api.create_job(ITEMS, title="crash book", voice="en-us")
    assert api.generate(job["id"]).status_code == 202
    api.wait_job(job["id"], lambda j: j["status"] == "COMPLETED", timeout=90)
    renders = f"/api/jobs/{job['id']}/renders"

    # 1. A render starts; once its holder has renewed the lock, kill the holder.
    started = api.request("POST", renders, json={"format": "mp3"})
    assert started.status_code == 202, started.text
    first = started.json()["id"]
    lock = render_lock(db)
    holder_pid = int(lock.holder.split(":")[1])
    assert holder_pid in server.worker_pids()
    wait_until(
        lambda: render_lock(db).expires_at != lock.expires_at,
        timeout=LOCK_TTL_SECONDS,
        what="the render lock renewed",
    )
    assert render_status(api, job["id"], first)["status"] == "RUNNING"
    workdirs = list(Path(tempfile.gettempdir()).glob(f"speechbatch-render-{holder_pid}-*"))
    assert workdirs, "the holder had no work folder"
    server.kill_worker(holder_pid)
    killed_at = time.monotonic()
    expiry_at_kill = render_lock(db).expires_at
    server.wait_for_workers(exclude={holder_pid})

    # 2. While the dead holder's lease runs, the job cannot be rendered again.
    set_expiry(db, lock.id, later(60))
    refused = api.request("POST", renders, json={"format": "m4b"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "render_in_progress"
    assert render_status(api, job["id"], first)["status"] == "RUNNING"
    set_expiry(db, lock.id, expiry_at_kill)

    # 3. Once the lease has run out, a read recovers the render.
    recovered = ended(api, job["id"], first, LOCK_TTL_SECONDS + 10)
    metric("render_recovered_after_kill_s", round(time.monotonic() - killed_at, 2))
    assert recovered["status"] == "FAILED"
    assert recovered["error_message"] == RECOVERED_MESSAGE
    assert recovered["download_url"] is None
    assert api.request("GET", f"{renders}/{first}/download").status_code == 404

    # 4. A new render reclaims the lock, sweeps the dead one's work folder, and completes.
    again = api.request("POST", renders, json={"format": "mp3", "gap_ms": 250})
    assert again.status_code == 202, again.text
    done = ended(api, job["id"], again.json()["id"], 2 * len(ITEMS) * READ_DELAY_SECONDS + 30)
    assert done["status"] == "COMPLETED", done
    assert not any(w.exists() for w in workdirs)
    audio = api.request("GET", done["download_url"])
    assert audio.status_code == 200
    assert audio.headers["Content-Type"] == "audio/mpeg"
    samples, rate = decode_all(audio.content)
    assert abs(len(samples) / rate - done["duration_seconds"]) < 0.05
    captions = api.request("GET", done["captions"]["srt"])
    # A cue of 42-character lines: its text is the item's, broken across its lines.
    assert [" ".join(cue[2].split()) for cue in parse_cues(captions.text)] == ITEMS
    listed = api.request("GET", renders).json()["renders"]
    assert [(r["id"], r["status"]) for r in listed] == [
        (done["id"], "COMPLETED"),
        (first, "FAILED"),
    ]
