"""A holder SIGKILLed in the middle of an export: 409 while its lease runs, then recovery.

The server is real gunicorn with one worker. To catch the builder mid-export, its storage
reads audio slowly (``tests/support/slow_reads.py``). The lease is short
(``SPEECHBATCH_EXPORT_LOCK_TTL_SECONDS``), so the builder renews it every third of that.
"""

from __future__ import annotations

import csv
import hashlib
import io
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select, text, update

from speechbatch.adapters.db import later
from speechbatch.adapters.repositories.job_locks import job_locks
from tests.e2e.conftest import Metric
from tests.support.fake_provider import fake_audio
from tests.support.server import ApiClient, GunicornServer, wait_until
from tests.support.slow_reads import slow_reads_server

LOCK_TTL_SECONDS = 6.0
READ_DELAY_SECONDS = 0.4
ITEMS = 16
RECOVERED_MESSAGE = "auto-recovered: export holder stopped renewing its lock"


@pytest.fixture
def server(env: dict[str, str], api_token: str, tmp_path: Path) -> Iterator[GunicornServer]:
    """One gunicorn worker with slow audio reads and a short export lease."""
    server_env = {
        **env,
        "SPEECHBATCH_EXPORT_LOCK_TTL_SECONDS": f"{LOCK_TTL_SECONDS:g}",
        # Archives are built in TMPDIR/speechbatch-exports: the test's own, to look into.
        "TMPDIR": str(tmp_path),
    }
    server = slow_reads_server(
        server_env, tmp_path, delay=READ_DELAY_SECONDS, workers=1, threads=4, name="export"
    )
    try:
        yield server.start()
    finally:
        server.stop(graceful=False)


def lock_rows(db: Engine) -> list[Any]:
    """Every job lock row, oldest first."""
    with db.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT id, organization_id, holder, expires_at, released_at "
                    "FROM job_locks ORDER BY id"
                )
            )
        )


def expiry(db: Engine, lock_id: int) -> Any:
    """A lock's expires_at."""
    with db.connect() as conn:
        return conn.execute(
            select(job_locks.c.expires_at).where(job_locks.c.id == lock_id)
        ).scalar_one()


def set_expiry(db: Engine, lock_id: int, expires_at: Any) -> None:
    """Write a lock's expires_at: a value read before, or the database's ``later(s)``."""
    with db.begin() as conn:
        conn.execute(
            update(job_locks).where(job_locks.c.id == lock_id).values(expires_at=expires_at)
        )


def export_status(api: ApiClient, export_id: int) -> dict[str, Any]:
    """GET /api/exports/ID (asserts 200)."""
    response = api.request("GET", f"/api/exports/{export_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_sigkilled_export_holder_is_recovered_and_the_next_export_succeeds(
    server: GunicornServer, api_token: str, db: Engine, tmp_path: Path, metric: Metric
) -> None:
    api = ApiClient(server.base_url, api_token)
    texts = [f"crash test item {i}" for i in range(1, ITEMS + 1)]
    job = api.create_job(texts, title="to export")
    assert api.generate(job["id"]).status_code == 202
    api.wait_job(job["id"], lambda j: j["status"] == "COMPLETED", timeout=60)

    # 1. An export starts; wait until its holder has renewed the lock once, then kill it.
    started = api.request("POST", "/api/exports")
    assert started.status_code == 202, started.text
    first_id = started.json()["id"]
    (lock,) = lock_rows(db)
    holder_pid = int(lock.holder.split(":")[1])
    assert holder_pid in server.worker_pids()
    wait_until(
        lambda: lock_rows(db)[0].expires_at != lock.expires_at,
        timeout=LOCK_TTL_SECONDS,
        what="the export lock renewed",
    )
    assert export_status(api, first_id)["status"] == "RUNNING"
    server.kill_worker(holder_pid)
    killed_at = time.monotonic()
    expiry_at_kill = expiry(db, lock.id)  # a dead holder renews no more
    exports_dir = tmp_path / "audio" / "exports" / str(lock.organization_id)
    scratch = tmp_path / "speechbatch-exports"
    leftovers = list(scratch.glob(f".tmp-*-{lock.organization_id}-*.zip"))
    assert leftovers, "the holder was killed before it began writing"
    server.wait_for_workers(exclude={holder_pid})

    # 2. While the dead holder's lease runs, nobody else may export, and its export is live.
    # The worker's respawn can outlast what was left of a 6-s lease on a busy machine: the
    # lease is made to run on (by the database's clock) for this step, then given back.
    set_expiry(db, lock.id, later(60))
    refused = api.request("POST", "/api/exports")
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "export_in_progress"
    assert export_status(api, first_id)["status"] == "RUNNING"
    set_expiry(db, lock.id, expiry_at_kill)

    # 3. Once the lease has run out, a read recovers the export.
    recovered = wait_until(
        lambda: (body := export_status(api, first_id))["status"] != "RUNNING" and body,
        timeout=LOCK_TTL_SECONDS + 5,
        interval=0.2,
        what="the killed export recovered",
    )
    recovered_after = time.monotonic() - killed_at
    metric("export_recovered_after_kill_s", round(recovered_after, 2))
    assert recovered["status"] == "FAILED"
    assert recovered["error_message"] == RECOVERED_MESSAGE
    assert recovered["download_url"] is None
    assert api.request("GET", f"/api/exports/{first_id}/download").status_code == 404

    # 4. The next export reclaims the expired lock and completes with every file.
    again = api.request("POST", "/api/exports")
    assert again.status_code == 202, again.text
    second_id = again.json()["id"]
    done = wait_until(
        lambda: (body := export_status(api, second_id))["status"] != "RUNNING" and body,
        timeout=ITEMS * READ_DELAY_SECONDS + 20,
        interval=0.2,
        what="the second export ended",
    )
    assert done["status"] == "COMPLETED", done
    archive_response = api.request("GET", done["download_url"])
    assert archive_response.status_code == 200
    assert archive_response.headers["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(archive_response.content))
    manifest = list(csv.DictReader(io.StringIO(archive.read("manifest.csv").decode())))
    assert [row["text"] for row in manifest] == texts
    for row in manifest:
        data = archive.read(row["file_name"])
        assert data == fake_audio(row["text"])
        assert row["sha256"] == hashlib.sha256(data).hexdigest()
    # The dead holder's lock was released by the reclaim, the new one at completion;
    # the dead holder's temp file was swept by the next holder of the lock.
    rows = lock_rows(db)
    assert len(rows) == 2
    assert all(r.released_at is not None for r in rows)
    assert sorted(p.name for p in exports_dir.iterdir()) == [f"export-{second_id}.zip"]
    assert list(scratch.iterdir()) == []
