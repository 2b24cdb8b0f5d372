"""Exports through the API and the page: one at a time per organization, fenced by the lock.

Items reach DONE through the real runner with the fake provider. A builder is held in
the middle of its work with a storage whose reads wait on a gate (``Services.storage`` is
what the builder reads through).
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from speechbatch import create_app
from speechbatch.adapters.db import ago
from speechbatch.adapters.models import Item
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.exports import ExportRepository, exports
from speechbatch.adapters.repositories.job_locks import LockRepository, job_locks
from speechbatch.app import Services
from speechbatch.config import Settings
from speechbatch.runner.export_builder import scratch_dir, spreadsheet_safe, wait_for_exports
from speechbatch.services import create_admin, create_token, sessions
from speechbatch.services.exports import JOB_TYPE, RECOVERED_MESSAGE
from speechbatch.services.ports import Storage
from tests.conftest import STORAGES, close_services, with_settings
from tests.fakes import FakeProvider, fake_audio
from tests.helpers import concrete, wait_for
from tests.support.storages import StorageProxy, stored_keys

# Every test here runs on the folder and on a bucket (SeaweedFS).
pytestmark = pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
EXPORT_KEYS = {"id", "status", "error_message", "download_url", "created_at", "finished_at"}


class GatedStorage(StorageProxy):
    """Reads wait for a gate (or sleep), so a test can catch a builder mid-export."""

    def __init__(self, inner: Storage, gate: threading.Event | None = None, delay: float = 0):
        super().__init__(inner)
        self.gate = gate
        self.delay = delay
        self.opened = threading.Event()

    def open(self, key: str) -> BinaryIO:
        self.opened.set()
        if self.gate is not None:
            self.gate.wait(15)
        if self.delay:
            time.sleep(self.delay)
        return super().open(key)


class BrokenStorage(StorageProxy):
    """Every read fails as a disk would."""

    def open(self, key: str) -> BinaryIO:
        raise PermissionError(13, "Permission denied", key)


@pytest.fixture(autouse=True)
def builders_end(app: Flask) -> Iterator[None]:
    """Every export builder of the test ends before the app and its database go away."""
    yield
    assert wait_for_exports(20), "an export builder was still running"


@pytest.fixture
def gate(svc: Services) -> Iterator[threading.Event]:
    """Hold every export's reads until the test sets the gate (set at teardown anyway)."""
    event = threading.Event()
    svc.builders.storage = GatedStorage(svc.storage, event)
    try:
        yield event
    finally:
        event.set()


def finished_job(client: FlaskClient, auth: dict[str, str], texts: list[str]) -> dict[str, Any]:
    """A job whose items all reached DONE through the runner and the fake provider."""
    created = client.post(
        "/api/jobs", json={"title": "export me", "voice": "alloy", "items": texts}, headers=auth
    )
    assert created.status_code == 201, created.get_json()
    job_id = created.get_json()["id"]
    assert client.post(f"/api/jobs/{job_id}/generate", headers=auth).status_code == 202

    def completed() -> dict[str, Any]:
        job: dict[str, Any] = client.get(f"/api/jobs/{job_id}", headers=auth).get_json()
        return job if job["status"] == "COMPLETED" else {}

    return wait_for(completed)


def start(client: FlaskClient, auth: dict[str, str]) -> dict[str, Any]:
    """POST /api/exports and expect 202."""
    response = client.post("/api/exports", headers=auth)
    assert response.status_code == 202, response.get_json()
    body: dict[str, Any] = response.get_json()
    return body


def wait_ended(client: FlaskClient, auth: dict[str, str], export_id: int) -> dict[str, Any]:
    """Poll GET /api/exports/ID until it is no longer RUNNING."""

    def ended() -> dict[str, Any]:
        body: dict[str, Any] = client.get(f"/api/exports/{export_id}", headers=auth).get_json()
        return body if body["status"] != "RUNNING" else {}

    return wait_for(ended, timeout=20)


def download(client: FlaskClient, url: str, auth: dict[str, str]) -> tuple[int, str, bytes]:
    """GET a (file) response and close it: status, mimetype, body."""
    with client.get(url, headers=auth) as response:
        return response.status_code, response.mimetype or "", response.get_data()


def lock_rows(svc: Services) -> list[Any]:
    """Every lock row, oldest first."""
    with concrete(svc.uow_factory)() as uow:
        return list(uow.session.execute(select(*job_locks.c).order_by(job_locks.c.id)))


def export_row(svc: Services, export_id: int) -> Any:
    """The stored export row."""
    with concrete(svc.uow_factory)() as uow:
        return uow.session.execute(select(*exports.c).where(exports.c.id == export_id)).one()


# --- end to end ----------------------------------------------------------------------------


def test_export_end_to_end_through_the_api(
    client: FlaskClient, auth: dict[str, str], svc: Services, provider: FakeProvider
) -> None:
    first = finished_job(client, auth, ["alpha one", "alpha two", "alpha, three"])
    second = finished_job(client, auth, ['beta "quoted"', "beta two"])

    started = start(client, auth)
    assert set(started) == EXPORT_KEYS
    assert started["status"] == "RUNNING"
    assert started["download_url"] is None
    assert started["finished_at"] is None
    assert started["created_at"].endswith("+00:00")
    done = wait_ended(client, auth, started["id"])
    assert done["status"] == "COMPLETED", done
    assert done["error_message"] is None
    assert done["download_url"] == f"/api/exports/{started['id']}/download"
    assert done["finished_at"].endswith("+00:00")

    status, mimetype, data = download(client, done["download_url"], auth)
    assert status == 200
    assert mimetype == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert archive.testzip() is None
    manifest = list(csv.DictReader(io.StringIO(archive.read("manifest.csv").decode())))
    assert set(archive.namelist()) == {"manifest.csv", *(row["file_name"] for row in manifest)}
    expected = [(first["id"], item) for item in first["items"]] + [
        (second["id"], item) for item in second["items"]
    ]
    assert [(int(r["job_id"]), int(r["position"]), r["text"]) for r in manifest] == [
        (job_id, item["position"], item["text"]) for job_id, item in expected
    ]
    with concrete(svc.uow_factory)() as uow:
        stored = {
            r.text: r.audio_sha256
            for r in uow.session.execute(select(Item.text, Item.audio_sha256))
        }
    for row in manifest:
        data = archive.read(row["file_name"])
        assert data == fake_audio(row["text"])
        assert row["sha256"] == hashlib.sha256(data).hexdigest() == stored[row["text"]]
        assert int(row["bytes"]) == len(data)
        assert row["voice"] == "alloy"
        assert row["job_title"] == "export me"
    # The lock was released at the end, and the archive is the only file left.
    assert all(r.released_at is not None for r in lock_rows(svc))
    exported = [k for k in stored_keys(svc.storage) if k.startswith("exports/")]
    assert exported == [f"exports/{_org(svc)}/export-{started['id']}.zip"]
    # Exporting never calls the (billed) provider.
    assert provider.total_calls() == 5


def test_export_includes_reused_audio(
    client: FlaskClient, auth: dict[str, str], provider: FakeProvider
) -> None:
    finished_job(client, auth, ["shared line", "first only"])
    second = finished_job(client, auth, ["shared line"])
    assert second["items"][0]["reused"] is True and provider.calls["shared line"] == 1
    done = wait_ended(client, auth, start(client, auth)["id"])
    archive = zipfile.ZipFile(io.BytesIO(download(client, done["download_url"], auth)[2]))
    manifest = list(csv.DictReader(io.StringIO(archive.read("manifest.csv").decode())))
    shared = [r for r in manifest if r["text"] == "shared line"]
    assert [int(r["job_id"]) for r in shared] == [second["id"] - 1, second["id"]]
    assert all(archive.read(r["file_name"]) == fake_audio("shared line") for r in shared)


def _org(svc: Services) -> int:
    with svc.uow_factory() as uow:
        user = uow.users.get_user_by_email("admin@acme.test")
    assert user is not None
    return user.organization_id


def test_export_of_an_organization_without_audio_has_only_a_manifest(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    done = wait_ended(client, auth, start(client, auth)["id"])

    archive = zipfile.ZipFile(io.BytesIO(download(client, done["download_url"], auth)[2]))

    assert archive.namelist() == ["manifest.csv"]
    assert archive.read("manifest.csv").decode().splitlines() == [
        "job_id,job_title,position,key,text,voice,file_name,bytes,sha256"
    ]


# --- one at a time ---------------------------------------------------------------------------


def test_second_export_while_one_is_live_answers_409(
    client: FlaskClient, auth: dict[str, str], svc: Services, gate: threading.Event
) -> None:
    finished_job(client, auth, ["one", "two"])
    running = start(client, auth)
    assert isinstance(svc.builders.storage, GatedStorage)
    assert svc.builders.storage.opened.wait(10)  # the builder is mid-export, its lock live

    began = time.monotonic()
    refused = client.post("/api/exports", headers=auth)
    elapsed = time.monotonic() - began

    assert refused.status_code == 409
    assert refused.get_json()["error"]["code"] == "export_in_progress"
    # The builder holds no transaction while it works: the refusal did not wait for it.
    assert elapsed < 3
    assert len(lock_rows(svc)) == 1
    gate.set()
    assert wait_ended(client, auth, running["id"])["status"] == "COMPLETED"
    assert wait_ended(client, auth, start(client, auth)["id"])["status"] == "COMPLETED"


def test_a_live_lock_of_another_holder_answers_409(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    with concrete(svc.uow_factory)() as uow:
        LockRepository(uow.session).acquire(admin.organization_id, JOB_TYPE, "another-service", 60)
        uow.commit()

    refused = client.post("/api/exports", headers=auth)

    assert refused.status_code == 409
    assert refused.get_json()["error"]["code"] == "export_in_progress"


def test_download_is_404_until_completed(
    client: FlaskClient, auth: dict[str, str], svc: Services, gate: threading.Event
) -> None:
    finished_job(client, auth, ["one"])
    running = start(client, auth)

    early = client.get(f"/api/exports/{running['id']}/download", headers=auth)
    gate.set()
    wait_ended(client, auth, running["id"])
    later = download(client, f"/api/exports/{running['id']}/download", auth)

    assert early.status_code == 404
    assert early.get_json()["error"]["code"] == "not_found"
    assert later[:2] == (200, "application/zip")


def test_export_of_another_organization_is_404(
    client: FlaskClient, auth: dict[str, str], svc: Services
) -> None:
    done = wait_ended(client, auth, start(client, auth)["id"])
    create_admin(svc.uow_factory, "rival", "admin@rival.test", "password-2")
    rival = {"Authorization": f"Bearer {create_token(svc.uow_factory, 'admin@rival.test')}"}

    assert client.get(f"/api/exports/{done['id']}", headers=rival).status_code == 404
    assert client.get(f"/api/exports/{done['id']}/download", headers=rival).status_code == 404
    assert client.get("/api/exports/999999", headers=auth).status_code == 404
    # Locks are per organization: the rival may export at the same time.
    assert start(client, rival)["status"] == "RUNNING"


def test_exports_api_requires_authentication(client: FlaskClient) -> None:
    assert client.post("/api/exports").status_code == 401
    assert client.get("/api/exports/1").status_code == 401
    assert client.get("/api/exports/1/download").status_code == 401


# --- lease expiry and fencing -----------------------------------------------------------------


@pytest.mark.parametrize("how", ["expired", "released"])
def test_running_export_whose_lock_is_gone_is_failed_on_read(
    how: str, client: FlaskClient, auth: dict[str, str], svc: Services, gate: threading.Event
) -> None:
    finished_job(client, auth, ["one", "two"])
    running = start(client, auth)
    lock_id = export_row(svc, running["id"]).lock_id
    values = {"expires_at": ago(1)} if how == "expired" else {"released_at": ago(0)}
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(update(job_locks).where(job_locks.c.id == lock_id).values(**values))
        uow.commit()

    recovered = client.get(f"/api/exports/{running['id']}", headers=auth).get_json()
    gate.set()  # the old builder wakes up: every write it tries now is fenced
    assert wait_for_exports(10), "the fenced builder did not end"
    after = client.get(f"/api/exports/{running['id']}", headers=auth).get_json()

    assert recovered["status"] == "FAILED"
    assert recovered["error_message"] == RECOVERED_MESSAGE
    assert recovered["finished_at"] is not None
    assert after == recovered
    assert export_row(svc, running["id"]).file_path is None
    assert not svc.storage.exists(f"exports/{_org(svc)}/export-{running['id']}.zip")
    # The next export reclaims the lock and completes.
    assert wait_ended(client, auth, start(client, auth)["id"])["status"] == "COMPLETED"


def test_builder_whose_lock_expired_unnoticed_cannot_complete(
    client: FlaskClient, auth: dict[str, str], svc: Services, gate: threading.Event
) -> None:
    finished_job(client, auth, ["one"])
    running = start(client, auth)
    lock_id = export_row(svc, running["id"]).lock_id
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(
            update(job_locks).where(job_locks.c.id == lock_id).values(expires_at=ago(1))
        )
        uow.commit()

    gate.set()  # nobody has read the export: only the lock id fences the builder
    assert wait_for_exports(10)
    stored = export_row(svc, running["id"])
    recovered = client.get(f"/api/exports/{running['id']}", headers=auth).get_json()

    assert stored.status == "RUNNING"  # the builder wrote nothing
    assert stored.file_path is None
    assert not svc.storage.exists(f"exports/{_org(svc)}/export-{running['id']}.zip")
    assert recovered["status"] == "FAILED"
    assert recovered["error_message"] == RECOVERED_MESSAGE


@pytest.mark.parametrize("how", ["expired", "other_holder"])
def test_complete_export_is_fenced_by_the_live_lock(
    how: str, svc: Services, admin: UserRecord
) -> None:
    with concrete(svc.uow_factory)() as uow:
        grant = LockRepository(uow.session).acquire(admin.organization_id, JOB_TYPE, "me", 60)
        export_id = ExportRepository(uow.session).create_export(
            admin.organization_id, admin.id, grant.id
        )
        uow.commit()
    if how == "expired":
        with concrete(svc.uow_factory)() as uow:
            uow.session.execute(
                update(job_locks).where(job_locks.c.id == grant.id).values(expires_at=ago(1))
            )
            uow.commit()
    holder = "me" if how == "expired" else "somebody-else"

    with concrete(svc.uow_factory)() as uow:
        won = ExportRepository(uow.session).complete_export(
            export_id, grant.id, holder, "exports/x.zip"
        )

    assert not won
    assert export_row(svc, export_id).status == "RUNNING"
    assert [r.released_at for r in lock_rows(svc)] == [None]


def test_slow_export_that_renews_its_lock_is_never_recovered(
    settings: Settings,
    provider: FakeProvider,
    auth: dict[str, str],
    client: FlaskClient,
    svc: Services,
) -> None:
    finished_job(client, auth, [f"item {i}" for i in range(8)])
    # A lease shorter than the whole export (8 reads of 0.3 s): only renewal keeps it alive.
    # Renewals come between reads, so a lease must outlast one read with room to spare: a
    # read from SeaweedFS on a loaded CI machine took over 0.45 s, past a 0.6 s lease's
    # renewal point, and the export was recovered.
    ttl = 1.5
    slow_app: Flask = create_app(
        with_settings(settings, export_lock_ttl_seconds=ttl), provider=provider
    )
    slow_svc: Services = slow_app.extensions["speechbatch"]
    slow_svc.builders.storage = GatedStorage(slow_svc.storage, delay=0.3)
    slow = slow_app.test_client()
    try:
        export_id = start(slow, auth)["id"]
        seen = set()
        began = time.monotonic()
        while True:  # polled all along: every read may recover an export whose lock ran out
            body = slow.get(f"/api/exports/{export_id}", headers=auth).get_json()
            seen.add(body["status"])
            if body["status"] != "RUNNING" or time.monotonic() - began > 20:
                break
            time.sleep(0.05)
    finally:
        wait_for_exports(20)
        close_services(slow_svc)

    assert body["status"] == "COMPLETED", body
    assert seen == {"RUNNING", "COMPLETED"}
    # One grant, held past its first lease by the database's clock: it was renewed.
    (lock,) = lock_rows(svc)
    assert (lock.released_at - lock.acquired_at).total_seconds() > ttl


class UnreachableStore(StorageProxy):
    """The archive's upload fails as a store that is down does."""

    def write_file(self, key: str, source: Path) -> None:
        raise OSError(5, f"object storage upload of {key!r} failed: connection refused")


@pytest.mark.parametrize(
    ("broken", "message"),
    [(BrokenStorage, "Permission denied"), (UnreachableStore, "object storage upload of")],
    ids=["reads-fail", "store-down-at-upload"],
)
def test_failed_build_ends_failed_and_releases_the_lock(
    client: FlaskClient,
    auth: dict[str, str],
    svc: Services,
    broken: type[StorageProxy],
    message: str,
) -> None:
    """A build whose reads fail, or whose upload finds the store down, ends FAILED with
    the error's message and leaves no archive, stored or local; the next one completes."""
    finished_job(client, auth, ["one"])
    svc.builders.storage = broken(svc.storage)

    failed = wait_ended(client, auth, start(client, auth)["id"])
    svc.builders.storage = svc.storage

    assert failed["status"] == "FAILED"
    assert failed["error_message"].startswith("export failed: ")
    assert message in failed["error_message"]
    assert failed["download_url"] is None
    assert all(r.released_at is not None for r in lock_rows(svc))
    assert not [k for k in stored_keys(svc.storage) if k.startswith("exports/")]
    assert not _scratch_files(svc)
    assert wait_ended(client, auth, start(client, auth)["id"])["status"] == "COMPLETED"


def _scratch_files(svc: Services) -> list[Path]:
    """This test's archives under construction in the machine's scratch folder."""
    deployment = hashlib.sha256(svc.settings.database_url.encode()).hexdigest()[:12]
    return list(scratch_dir().glob(f".tmp-{deployment}-*"))


# --- the page and the browser session ----------------------------------------------------------


def sign_in(client: FlaskClient, user: UserRecord) -> None:
    """Give the test client a signed-in session (opened on the server, as sign-in does)."""
    secret = sessions.start_session(client.application.extensions["speechbatch"].uow_factory, user)
    with client.session_transaction() as session:
        session["sid"] = secret
        session["email"] = user.email


def csrf_token_of(html: str) -> str:
    """The hidden csrf_token of a page's form."""
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "no csrf_token field"
    return match.group(1)


def test_exports_page_requires_a_session(client: FlaskClient) -> None:
    response = client.get("/exports")

    assert response.status_code == 302
    assert response.headers["Location"].startswith("/login")


def test_exports_page_starts_an_export_and_lists_it(
    client: FlaskClient, admin: UserRecord, svc: Services
) -> None:
    sign_in(client, admin)
    page = client.get("/exports")
    assert page.status_code == 200
    assert "New export" in page.text

    created = client.post("/exports", data={"csrf_token": csrf_token_of(page.text)})

    assert created.status_code == 302
    assert created.headers["Location"] == "/exports"
    with concrete(svc.uow_factory)() as uow:
        export_id: int = uow.session.execute(select(exports.c.id)).scalar_one()

    def ready_page() -> str:
        html = client.get("/exports").text
        return html if "Download ZIP" in html else ""

    listing = wait_for(ready_page, timeout=20)
    assert f'data-export-id="{export_id}"' in listing
    assert f"/api/exports/{export_id}/download" in listing


def test_exports_page_form_without_csrf_token_changes_nothing(
    client: FlaskClient, admin: UserRecord, svc: Services
) -> None:
    sign_in(client, admin)

    refused = client.post("/exports", data={})

    assert refused.status_code == 400
    assert lock_rows(svc) == []


def test_session_api_write_needs_the_csrf_header(
    client: FlaskClient, admin: UserRecord, svc: Services
) -> None:
    sign_in(client, admin)
    token = csrf_token_of(client.get("/exports").text)

    refused = client.post("/api/exports")
    accepted = client.post("/api/exports", headers={"X-CSRFToken": token})

    assert refused.status_code == 400
    assert refused.get_json()["error"]["code"] == "bad_request"
    assert accepted.status_code == 202
    wait_ended(client, {}, accepted.get_json()["id"])


def test_manifest_cells_that_a_spreadsheet_would_run_are_escaped(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    texts = ["=HYPERLINK(1)", "+1+1", "-2+3", "@SUM(A1)", "plain - text"]
    finished_job(client, auth, texts)
    done = wait_ended(client, auth, start(client, auth)["id"])
    _, _, data = download(client, done["download_url"], auth)
    manifest = zipfile.ZipFile(io.BytesIO(data)).read("manifest.csv").decode()
    cells = sorted(row["text"] for row in csv.DictReader(io.StringIO(manifest)))
    assert cells == sorted(["'=HYPERLINK(1)", "'+1+1", "'-2+3", "'@SUM(A1)", "plain - text"])


@pytest.mark.parametrize("cell", ["=1", "+1", "-1", "@1", "\t1", "\r1"])
def test_spreadsheet_safe_escapes_each_formula_start(cell: str) -> None:
    assert spreadsheet_safe(cell) == "'" + cell
    assert spreadsheet_safe("a" + cell) == "a" + cell
