"""Faults at the end of a render or an export: nothing is lost, nothing deleted on a guess.

A builder's end is: renew the lock, upload the files, renew again, then one transaction
that completes the work (and releases the lock), or one that fails it. The faults
(``tests/support/lost_acks.py``) hit each of those steps: commits whose acknowledgement
is lost (or that never reach the server), an upload that lands and then reports a
failure. On both databases and both storages, each test starts one export or render per
fault, one after another in the same app (one app per test keeps the suite lean), and
checks after each: the work ends as the fault must end it; a COMPLETED one serves every
file, also after ``gc``; a FAILED one leaves no file behind, at once when its end surely
committed, after ``gc`` when the builder could not know; the lock is released.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.job_locks import job_locks
from speechbatch.app import Services
from speechbatch.runner.export_builder import wait_for_exports
from speechbatch.runner.render_builder import wait_for_renders
from speechbatch.services.ports import Storage
from speechbatch.services.spending import collect_garbage
from tests.conftest import STORAGES
from tests.helpers import concrete
from tests.support.lost_acks import EVERY_COMMIT, FailsAfterUpload, LostAcks
from tests.support.render_audio import Tone, finished_job
from tests.support.storages import EVERYTHING, stored_keys

pytestmark = pytest.mark.parametrize("storage_kind", STORAGES, indirect=True)
TONES = [Tone("One.", 0.3, 330, 0.2), Tone("Two.", 0.3, 440, 0.2)]
RENDER_FILES = 3  # the audio, its WebVTT and its SRT captions


@dataclass(frozen=True)
class Fault:
    """One fault at a builder's end and the outcome it must lead to."""

    name: str
    expected: str  # COMPLETED or FAILED
    method: str | None = None  # the transaction whose commit fails (see LostAcks)
    times: int = 1
    reached: bool = True  # the COMMIT reached the server before the connection dropped
    failed_upload: int | None = None  # the upload that lands and then reports a failure

    def units(self, svc: Services) -> Any:
        """The builders' unit-of-work factory with this fault."""
        if self.method is None:
            return svc.uow_factory
        return LostAcks(
            concrete(svc.uow_factory), self.method, times=self.times, reached=self.reached
        )

    def storage(self, svc: Services) -> Storage:
        """The builders' storage with this fault."""
        if self.failed_upload is None:
            return svc.storage
        return FailsAfterUpload(svc.storage, self.failed_upload)


def faults(kind: str, uploads: int) -> list[Fault]:
    """The faults at the end of a ``kind`` builder (``render`` or ``export``) whose work is
    ``uploads`` files."""
    complete, fail = f"{kind}s.complete_{kind}", f"{kind}s.fail_{kind}"
    found = [
        Fault("renewal-ack-lost", "COMPLETED", "locks.renew", times=2),
        Fault("completion-ack-lost", "COMPLETED", complete),
        Fault("every-ack-lost", "COMPLETED", EVERY_COMMIT, times=100),
        Fault("completion-unreached-twice", "COMPLETED", complete, times=2, reached=False),
        Fault("upload-fails-after-landing", "FAILED", failed_upload=uploads),
        Fault("failure-ack-lost", "FAILED", fail, failed_upload=uploads),
        Fault("every-ack-lost-on-failure", "FAILED", EVERY_COMMIT, 100, failed_upload=uploads),
    ]
    if uploads > 1:
        found.append(Fault("first-upload-fails-after-landing", "FAILED", failed_upload=1))
    return found


@pytest.fixture(autouse=True)
def builders_end(app: Flask) -> Iterator[None]:
    """Every builder of the test ends before the app and its database go away."""
    yield
    assert wait_for_renders(30) and wait_for_exports(30), "a builder was still running"


def with_fault(svc: Services, fault: Fault) -> None:
    """Give the app's builders the fault's units of work and storage."""
    svc.builders.uow_factory = fault.units(svc)
    svc.builders.storage = fault.storage(svc)


def ended(client: FlaskClient, auth: dict[str, str], url: str) -> dict[str, Any]:
    """The work as the API shows it once its builder has ended (a read recovers it)."""
    assert wait_for_renders(30) and wait_for_exports(30)
    response = client.get(url, headers=auth)
    assert response.status_code == 200, response.get_json()
    body: dict[str, Any] = response.get_json()
    return body


def fetched(client: FlaskClient, auth: dict[str, str], url: str) -> bytes:
    """A file the API serves (asserts 200)."""
    with client.get(url, headers=auth) as response:
        assert response.status_code == 200, url
        return response.get_data()


def after_gc(svc: Services, prefix: str) -> list[str]:
    """Run ``gc`` over every file, however fresh; the files left under ``prefix``."""
    collect_garbage(svc.uow_factory, svc.storage, min_age_seconds=-EVERYTHING)
    return [k for k in stored_keys(svc.storage) if k.startswith(prefix)]


def locks_released(svc: Services) -> bool:
    """Whether every lock of the test has been released."""
    with concrete(svc.uow_factory)() as uow:
        released: list[Any] = list(uow.session.execute(select(job_locks.c.released_at)).scalars())
    return bool(released) and None not in released


def check_end(
    svc: Services, client: FlaskClient, auth: dict[str, str], fault: Fault, work: dict[str, Any]
) -> list[str]:
    """The promises after ``fault``: ``work`` (an export or a render as the API shows it)
    ended as the fault must end it, with every file when COMPLETED, and with none left
    when FAILED (at once when its failure surely committed, after ``gc`` when the builder
    could not know); the lock is released. The URLs of its files."""
    assert work["status"] == fault.expected, (fault.name, work)
    urls = [work["download_url"], *(work.get("captions") or {}).values()]
    prefix = work["files"]
    if work["status"] == "COMPLETED":
        served = [fetched(client, auth, url) for url in urls]
        assert all(served), fault.name
        assert len(after_gc(svc, prefix)) == len(urls), fault.name
        assert [fetched(client, auth, url) for url in urls] == served, fault.name
    else:
        if fault.method is None:
            assert not [k for k in stored_keys(svc.storage) if k.startswith(prefix)], fault.name
        assert after_gc(svc, prefix) == [], fault.name
        urls = []
    assert locks_released(svc), fault.name
    return urls


def test_no_fault_at_a_renders_end_loses_a_file(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str]
) -> None:
    """Renders of one job, one per fault at the builder's end, one after another."""
    job_id = finished_job(svc, admin, TONES)
    base = f"/api/jobs/{job_id}/renders"
    completed: list[str] = []
    for fault in faults("render", RENDER_FILES):
        with_fault(svc, fault)
        started = client.post(base, json={"format": "mp3"}, headers=auth)
        assert started.status_code == 202, started.get_json()
        render_id = started.get_json()["id"]
        render = ended(client, auth, f"{base}/{render_id}")
        render["files"] = f"renders/{admin.organization_id}/job-{job_id}/render-{render_id}."
        completed += check_end(svc, client, auth, fault, render)
    # Every COMPLETED render still serves its files after all of that.
    assert all(fetched(client, auth, url) for url in completed)


def test_no_fault_at_an_exports_end_loses_its_archive(
    svc: Services, admin: UserRecord, client: FlaskClient, auth: dict[str, str]
) -> None:
    """Exports of one organization, one per fault at the builder's end, one after another."""
    finished_job(svc, admin, TONES)
    completed: list[str] = []
    for fault in faults("export", 1):
        with_fault(svc, fault)
        started = client.post("/api/exports", headers=auth)
        assert started.status_code == 202, started.get_json()
        export_id = started.get_json()["id"]
        export = ended(client, auth, f"/api/exports/{export_id}")
        export["files"] = f"exports/{admin.organization_id}/export-{export_id}.zip"
        for url in check_end(svc, client, auth, fault, export):
            archive = zipfile.ZipFile(io.BytesIO(fetched(client, auth, url)))
            assert len(archive.namelist()) == len(TONES) + 1, fault.name
            completed.append(url)
    assert all(fetched(client, auth, url) for url in completed)
