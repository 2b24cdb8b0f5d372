"""The production shape "web + bucket" end to end: two gunicorn servers on PostgreSQL with
their audio and exports in SeaweedFS (SPEECHBATCH_STORAGE_URL=s3://…, the standard AWS
variables), a server SIGKILLed mid-run, downloads, an export and ``gc``, all through the
external contract."""

from __future__ import annotations

import csv
import io
import zipfile
from collections.abc import Callable

import pytest

from tests.support.fake_provider import FakeProvider
from tests.support.seaweed import SeaweedServer
from tests.support.server import ApiClient, GunicornServer, cli

PREFIX = "prod"


@pytest.fixture
def db_kind() -> str:
    """PostgreSQL only: the database of a deployment with several machines."""
    return "postgresql"


@pytest.fixture
def bucket(seaweed: SeaweedServer, env: dict[str, str]) -> str:
    """A fresh bucket that the test's app processes use (their env is changed in place)."""
    name = seaweed.new_bucket()
    env.update(seaweed.env())
    env["SPEECHBATCH_STORAGE_URL"] = f"s3://{name}/{PREFIX}"
    return name


def _objects(seaweed: SeaweedServer, bucket: str) -> dict[str, bytes]:
    client = seaweed.client()
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def test_web_plus_bucket_runs_survives_a_kill_downloads_exports_and_collects(
    bucket: str,
    seaweed: SeaweedServer,
    env: dict[str, str],
    spawn_server: Callable[..., GunicornServer],
    api_for: Callable[[GunicornServer], ApiClient],
    fake_provider: FakeProvider,
) -> None:
    fake_provider.latency = 0.3
    first = spawn_server(workers=1, threads=4, name="a")
    api = api_for(first)
    job_id = api.create_job([f"bucket line {i}" for i in range(10)])["id"]
    assert api.generate(job_id).status_code == 202
    api.wait_job(job_id, lambda j: j["progress"]["done"] >= 3, timeout=30)
    first.stop(graceful=False)  # SIGKILL mid-run: some items in flight, never stored

    second = spawn_server(workers=2, threads=4, name="b")
    api = api_for(second)
    # Recovered once the dead worker's heartbeat is old, then retried by a person.
    api.wait_job(job_id, lambda j: j["status"] == "FAILED", timeout=60, what="recovered")
    assert api.generate(job_id).status_code == 202
    job = api.wait_job(job_id, lambda j: j["status"] == "COMPLETED", timeout=60)

    stored = _objects(seaweed, bucket)
    for item in job["items"]:
        answer = api.audio(item["audio_url"])
        assert answer.status_code == 200 and answer.headers["Content-Type"] == "audio/mpeg"
        assert int(answer.headers["Content-Length"]) == len(answer.content) > 0
        # The bytes are the object's; its key carries the attempt that wrote it.
        matches = [k for k, v in stored.items() if v == answer.content]
        assert matches and all(k.startswith(f"{PREFIX}/") and "-a" in k for k in matches)

    export = api.request("POST", "/api/exports")
    assert export.status_code == 202, export.text
    export_id = export.json()["id"]
    done = api.wait_for(
        lambda: (
            (e := api.request("GET", f"/api/exports/{export_id}").json())["status"] != "RUNNING"
            and e
        ),
        timeout=30,
    )
    assert done["status"] == "COMPLETED", done
    archive = api.request("GET", done["download_url"])
    assert archive.status_code == 200 and archive.headers["Content-Type"] == "application/zip"
    names = zipfile.ZipFile(io.BytesIO(archive.content)).namelist()
    manifest = zipfile.ZipFile(io.BytesIO(archive.content)).read("manifest.csv").decode()
    assert len(list(csv.DictReader(io.StringIO(manifest)))) == 10 == len(names) - 1
    assert f"{PREFIX}/exports/1/export-{export_id}.zip" in _objects(seaweed, bucket)

    # Everything is younger than gc's hour: nothing is touched.
    output = cli(env, "gc")
    assert output.strip().splitlines()[-1] == "deleted 0 file(s)"
    assert _objects(seaweed, bucket).keys() >= stored.keys()
