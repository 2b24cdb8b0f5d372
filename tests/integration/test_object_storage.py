"""Audio in a bucket as in a folder: downloads answer the same bytes, types and lengths
(streamed, with ranges and a validator, or redirected to a presigned URL when the settings
ask), and a store that goes down mid-run marks nothing DONE without its object; a retry
once it is back completes the job."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient

from speechbatch import create_app
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.config import Settings
from speechbatch.services import start_generation
from tests.conftest import STORAGES, close_services, services, with_settings
from tests.fakes import FakeProvider, fake_audio
from tests.helpers import new_job, view, wait_for
from tests.support.seaweed import SeaweedServer
from tests.support.storages import StorageProxy, read_stored

STORAGE_KINDS = pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)


def finished(svc: Services, user: UserRecord, job_id: int) -> dict[str, Any]:
    """Run the job and wait until this process runs nothing; the job then."""
    start_generation(svc.uow_factory, svc.settings, svc.runner, user, job_id)
    wait_for(lambda: view(svc, user, job_id)["status"] != "GENERATING", timeout=30)
    wait_for(lambda: not svc.runner.live_runs(), timeout=30)
    return view(svc, user, job_id)


@STORAGE_KINDS
def test_item_audio_downloads_stream_with_type_length_ranges_and_validator(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str]
) -> None:
    job = finished(svc, admin, new_job(svc, admin, 2))
    item = job["items"][0]
    expected = fake_audio(item["text"])
    with client.get(item["audio_url"], headers=auth) as whole:
        assert whole.status_code == 200
        assert whole.mimetype == "audio/mpeg"
        assert whole.content_length == len(expected)
        assert whole.get_data() == expected
        etag = whole.headers["ETag"]
        assert f"job{job['id']}-item{item['id']}.mp3" in whole.headers["Content-Disposition"]
    with client.get(item["audio_url"], headers={**auth, "If-None-Match": etag}) as again:
        assert again.status_code == 304
    with client.get(item["audio_url"], headers={**auth, "Range": "bytes=2-5"}) as part:
        assert part.status_code == 206
        assert part.get_data() == expected[2:6]
        assert part.headers["Content-Range"] == f"bytes 2-5/{len(expected)}"


@STORAGE_KINDS
def test_presigned_downloads_redirect_to_the_bucket(
    settings: Settings,
    provider: FakeProvider,
    admin: UserRecord,
    auth: dict[str, str],
    storage_kind: str,
) -> None:
    """Behind SPEECHBATCH_STORAGE_PRESIGNED_DOWNLOADS a bucket's file is a redirect to a
    presigned URL that answers the bytes with the type and name; a folder still streams."""
    app = create_app(with_settings(settings, storage_presigned_downloads=True), provider=provider)
    svc = services(app)
    try:
        job = finished(svc, admin, new_job(svc, admin, 1))
        item = job["items"][0]
        with app.test_client().get(item["audio_url"], headers=auth) as answer:
            if storage_kind == "folder":
                assert answer.status_code == 200
                assert answer.get_data() == fake_audio(item["text"])
                return
            assert answer.status_code == 302
            location = answer.headers["Location"]
    finally:
        close_services(svc)
    direct = requests.get(location, timeout=10)
    assert direct.status_code == 200
    assert direct.content == fake_audio(item["text"])
    assert direct.headers["Content-Type"] == "audio/mpeg"
    assert (
        f'filename="job{job["id"]}-item{item["id"]}.mp3"' in direct.headers["Content-Disposition"]
    )


class DownStore(StorageProxy):
    """A store that answers nothing."""

    def open(self, key: str) -> Any:
        raise OSError(5, "object storage read failed: connection refused")


@STORAGE_KINDS
def test_a_download_from_a_store_that_is_down_is_a_503(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str]
) -> None:
    job = finished(svc, admin, new_job(svc, admin, 1))
    svc.storage = DownStore(svc.storage)
    answer = client.get(job["items"][0]["audio_url"], headers=auth)
    assert answer.status_code == 503
    assert answer.get_json()["error"]["code"] == "storage_unavailable"


@pytest.mark.parametrize("storage_kind", ["s3"], indirect=True)
def test_a_store_down_mid_run_marks_nothing_done_without_its_object(
    make_svc: Callable[..., Services],
    admin: UserRecord,
    provider: FakeProvider,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SeaweedFS of this test's own is killed while a job runs: the items whose audio
    could not be stored end ERROR with a message that says so (their call was made), none
    is DONE without its object; once the store is back, a retry completes the job."""
    store = SeaweedServer(tmp_path / "weed").start()
    try:
        for name, value in store.env().items():
            monkeypatch.setenv(name, value)
        svc = make_svc(storage_url=f"s3://{store.new_bucket()}/audio", item_concurrency=1)
        provider.latency = 0.15
        job_id = new_job(svc, admin, 8)
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
        wait_for(lambda: view(svc, admin, job_id)["progress"]["done"] >= 2, timeout=30)
        store.stop(signal.SIGKILL)
        wait_for(lambda: view(svc, admin, job_id)["status"] != "GENERATING", timeout=60)
        wait_for(lambda: not svc.runner.live_runs(), timeout=30)
        job = view(svc, admin, job_id)
        assert job["status"] == "FAILED"
        failed = [i for i in job["items"] if i["status"] == "ERROR"]
        assert failed, job["items"]
        for item in failed:
            assert item["error_message"].startswith("could not store audio: object storage"), item
            assert item["audio_url"] is None

        store.start()
        for item in job["items"]:
            if item["status"] == "DONE":  # DONE: its object is there, whole
                assert read_stored(svc.storage, _key(svc, admin, job_id, item)) == fake_audio(
                    item["text"]
                )
        retried = finished(svc, admin, job_id)
        assert retried["status"] == "COMPLETED"
        for item in retried["items"]:
            assert read_stored(svc.storage, _key(svc, admin, job_id, item)) == fake_audio(
                item["text"]
            )
    finally:
        store.stop()


def _key(svc: Services, user: UserRecord, job_id: int, item: dict[str, Any]) -> str:
    with svc.uow_factory(read_only=True) as uow:
        key = uow.views.item_audio(job_id, item["id"], user.organization_id)
    assert key is not None
    return key
