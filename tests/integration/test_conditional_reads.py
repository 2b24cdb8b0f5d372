"""ETags, 304s and partial reads of the job, its items and the list (CONTRACT)."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select, update

from speechbatch import create_app
from speechbatch.adapters.models import Item, Job
from speechbatch.adapters.read import DocumentCache, lease_variant, seen_version
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.config import Settings
from speechbatch.services import create_admin
from speechbatch.services.accounts import create_token
from tests.conftest import close_services, services, with_settings
from tests.fakes import FakeProvider
from tests.helpers import ago, claim, concrete, new_job, view

HOUR = 3600.0


def _get(client: FlaskClient, url: str, auth: dict[str, str], etag: str | None = None) -> Any:
    headers = dict(auth)
    if etag is not None:
        headers["If-None-Match"] = etag
    return client.get(url, headers=headers)


def _ids(svc: Services, user: UserRecord, job_id: int) -> list[int]:
    return [i["id"] for i in view(svc, user, job_id)["items"]]


def _claimed(svc: Services, admin: UserRecord) -> tuple[int, int]:
    """A claimed 3-item job, and its first item."""
    job_id = new_job(svc, admin)
    first = _ids(svc, admin, job_id)[0]
    claim(svc, admin, job_id)
    return job_id, first


def _versions(svc: Services, *job_ids: int) -> tuple[int, ...]:
    with concrete(svc.uow_factory)(read_only=True) as uow:
        found = {row.id: row.version for row in uow.session.execute(select(Job.id, Job.version))}
    return tuple(found[i] for i in job_ids)


def _start(svc: Services, job_id: int, item_id: int) -> None:
    with svc.uow_factory() as uow:
        assert uow.runs.start_item(job_id, 1, item_id) is not None
        uow.commit()


def test_a_matching_etag_answers_304_with_no_body(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    job_id = new_job(svc, admin)
    new_job(svc, admin, title="another")
    for url in (
        f"/api/jobs/{job_id}",
        f"/api/jobs/{job_id}/items",
        "/api/jobs",
        "/api/jobs?status=PENDING&page=2&per_page=1",
    ):
        first = _get(client, url, auth)
        assert first.status_code == 200 and first.headers["ETag"]
        again = _get(client, url, auth, first.headers["ETag"])
        assert again.status_code == 304, url
        assert again.data == b""
        assert again.headers["ETag"] == first.headers["ETag"]


def test_the_job_etag_changes_when_an_item_finishes(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    job_id, first = _claimed(svc, admin)
    _start(svc, job_id, first)
    url = f"/api/jobs/{job_id}"
    before = {u: _get(client, u, auth).headers["ETag"] for u in (url, f"{url}/items")}
    with svc.uow_factory() as uow:
        assert uow.runs.finish_item(job_id, 1, first, audio_path="a", audio_sha256="s")
        uow.commit()
    for u, etag in before.items():
        answer = _get(client, u, auth, etag)
        assert answer.status_code == 200, u
    assert _get(client, url, auth).get_json()["items"][0]["status"] == "DONE"


def test_the_job_etag_changes_when_a_run_ends(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    job_id = new_job(svc, admin)
    claim(svc, admin, job_id)
    etag = _get(client, f"/api/jobs/{job_id}", auth).headers["ETag"]
    with svc.uow_factory() as uow:
        assert uow.runs.interrupt_run(job_id, 1, "interrupted: the server stopped")
        uow.commit()
    answer = _get(client, f"/api/jobs/{job_id}", auth, etag)
    assert answer.status_code == 200
    assert answer.get_json()["runs"][-1]["outcome"] == "INTERRUPTED"


def test_the_job_etag_changes_when_recovery_flips_the_job(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    job_id = new_job(svc, admin)
    claim(svc, admin, job_id)
    _start(svc, job_id, _ids(svc, admin, job_id)[0])
    etag = _get(client, f"/api/jobs/{job_id}", auth).headers["ETag"]
    with concrete(svc.uow_factory)() as uow:  # the run goes silent for an hour
        uow.session.execute(update(Item).where(Item.job_id == job_id).values(updated_at=ago(HOUR)))
        uow.session.execute(update(Job).where(Job.id == job_id).values(updated_at=ago(HOUR)))
        uow.commit()
    answer = _get(client, f"/api/jobs/{job_id}", auth, etag)
    assert answer.status_code == 200
    assert answer.get_json()["status"] == "FAILED"


def test_the_job_etag_changes_when_the_lease_settings_do(
    client: FlaskClient,
    svc: Services,
    admin: UserRecord,
    auth: dict[str, str],
    settings: Settings,
    provider: FakeProvider,
) -> None:
    """The answer shows the lease settings: a restart with a longer lease changes it."""
    job_id = new_job(svc, admin)
    claim(svc, admin, job_id)
    url = f"/api/jobs/{job_id}"
    etags = [_get(client, u, auth).headers["ETag"] for u in (url, f"{url}?items=none")]
    restarted = create_app(
        with_settings(settings, lease_seconds=2 * settings.lease_seconds), provider=provider
    )
    try:
        for u, etag in zip((url, f"{url}?items=none"), etags, strict=True):
            answer = _get(restarted.test_client(), u, auth, etag)
            assert answer.status_code == 200, u
            assert answer.get_json()["lease"]["lease_seconds"] == 2 * settings.lease_seconds
    finally:
        close_services(services(restarted))


def test_the_list_etag_changes_when_a_job_is_added(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    new_job(svc, admin)
    etag = _get(client, "/api/jobs", auth).headers["ETag"]
    new_job(svc, admin, title="another")
    answer = _get(client, "/api/jobs", auth, etag)
    assert answer.status_code == 200
    assert answer.get_json()["total"] == 2


def test_the_filtered_list_etag_changes_when_one_job_leaves_and_another_enters(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    """The swap: same count, same newest id, same sum of versions, another answer."""
    leaving, entering, newest = (new_job(svc, admin, title=t) for t in ("a", "b", "c"))
    claim(svc, admin, leaving)
    claim(svc, admin, newest)
    url = "/api/jobs?status=GENERATING"
    before = _get(client, url, auth)
    assert [j["id"] for j in before.get_json()["jobs"]] == [newest, leaving]
    assert _versions(svc, leaving, entering) == (2, 1)
    with svc.uow_factory() as uow:  # one run stops, another job's run starts
        assert uow.runs.interrupt_run(leaving, 1, "interrupted: the server stopped")
        uow.commit()
    claim(svc, admin, entering)
    # Built on purpose: the entering job's version is the one the leaving job had.
    assert _versions(svc, leaving, entering) == (3, 2)
    answer = _get(client, url, auth, before.headers["ETag"])
    assert answer.status_code == 200
    assert [j["id"] for j in answer.get_json()["jobs"]] == [newest, entering]


def test_the_list_etag_stays_when_only_jobs_off_the_page_change(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    older = new_job(svc, admin, title="older")
    new_job(svc, admin, title="newer")
    url = "/api/jobs?per_page=1"
    etag = _get(client, url, auth).headers["ETag"]
    claim(svc, admin, older)  # on page 2: page 1 and the total stay as they were
    assert _get(client, url, auth, etag).status_code == 304
    assert _get(client, "/api/jobs?per_page=1&page=2", auth).get_json()["jobs"][0]["attempt"] == 1


def test_items_none_leaves_the_items_out(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    job_id = new_job(svc, admin, 5)
    full = _get(client, f"/api/jobs/{job_id}", auth)
    summary = _get(client, f"/api/jobs/{job_id}?items=none", auth)
    assert "items" not in summary.get_json()
    assert summary.get_json()["progress"] == full.get_json()["progress"]
    assert summary.get_json()["runs"] == full.get_json()["runs"]
    assert summary.headers["ETag"] != full.headers["ETag"]


def test_the_items_endpoint_pages_and_filters(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    job_id = new_job(svc, admin, 7)
    claim(svc, admin, job_id)
    ids = _ids(svc, admin, job_id)
    _start(svc, job_id, ids[4])
    page = _get(client, f"/api/jobs/{job_id}/items?offset=2&limit=3", auth).get_json()
    assert [i["position"] for i in page["items"]] == [3, 4, 5]
    assert page["total"] == 7
    assert set(page["items"][0]) >= {"id", "text", "status", "audio_url", "updated_at"}
    generating = _get(client, f"/api/jobs/{job_id}/items?status=GENERATING", auth).get_json()
    assert [i["id"] for i in generating["items"]] == [ids[4]]
    assert generating["total"] == 1
    assert _get(client, f"/api/jobs/{job_id}/items", auth).get_json()["total"] == 7


def test_the_list_pages_with_a_total(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    made = [new_job(svc, admin, 1, title=f"job {n}") for n in range(5)]
    answer = _get(client, "/api/jobs?page=2&per_page=2", auth).get_json()
    assert [j["id"] for j in answer["jobs"]] == [made[2], made[1]]
    assert (answer["total"], answer["page"], answer["per_page"]) == (5, 2, 2)
    assert "items" not in answer["jobs"][0] and "runs" not in answer["jobs"][0]
    assert answer["jobs"][0]["progress"]["total"] == 1


@pytest.mark.parametrize(
    "query",
    [
        "items?limit=0",
        "items?limit=1001",
        "items?offset=-1",
        "items?limit=ten",
        "items?status=FINISHED",
        "?items=some",
    ],
)
def test_bad_item_paging_is_422(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str], query: str
) -> None:
    job_id = new_job(svc, admin)
    sep = "/" if query.startswith("items") else ""
    answer = _get(client, f"/api/jobs/{job_id}{sep}{query}", auth)
    assert answer.status_code == 422
    assert answer.get_json()["error"]["code"] == "validation_error"


@pytest.mark.parametrize(
    "query", ["per_page=0", "per_page=201", "page=0", "page=two", "status=DONE"]
)
def test_bad_list_paging_is_422(client: FlaskClient, auth: dict[str, str], query: str) -> None:
    answer = _get(client, f"/api/jobs?{query}", auth)
    assert answer.status_code == 422
    assert answer.get_json()["error"]["code"] == "validation_error"


def test_the_items_of_another_organizations_job_are_404(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    job_id = new_job(svc, admin)
    assert _get(client, f"/api/jobs/{job_id + 1}/items", auth).status_code == 404


def test_a_page_far_beyond_the_end_is_empty_not_an_error(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    job_id = new_job(svc, admin)
    huge = 10**30
    jobs = _get(client, f"/api/jobs?page={huge}", auth)
    items = _get(client, f"/api/jobs/{job_id}/items?offset={huge}", auth)
    assert (jobs.status_code, items.status_code) == (200, 200)
    assert jobs.get_json()["jobs"] == [] and jobs.get_json()["total"] == 1
    assert items.get_json() == {"items": [], "total": 3}


# --- the process's document cache (read/documents.py) ----------------------------------


def test_an_unchanged_job_is_answered_from_the_cache_and_a_change_is_seen_at_once(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    job_id, first = _claimed(svc, admin)
    for url in (
        f"/api/jobs/{job_id}",
        f"/api/jobs/{job_id}?items=none",
        f"/api/jobs/{job_id}/items",
    ):
        built = _get(client, url, auth)
        hits = svc.documents.hits
        again = _get(client, url, auth)
        assert svc.documents.hits == hits + 1, url
        assert again.status_code == 200 and again.data == built.data, url
        assert again.headers["ETag"] == built.headers["ETag"], url
    _start(svc, job_id, first)
    with svc.uow_factory() as uow:
        assert uow.runs.finish_item(job_id, 1, first, audio_path="a", audio_sha256="s")
        uow.commit()
    hits = svc.documents.hits
    job = _get(client, f"/api/jobs/{job_id}", auth).get_json()
    page = _get(client, f"/api/jobs/{job_id}/items", auth).get_json()
    assert svc.documents.hits == hits  # a new version is built, not served from the cache
    assert job["items"][0]["status"] == page["items"][0]["status"] == "DONE"
    assert job["progress"]["done"] == 1
    # The same answer as a read that builds it (the helper leaves the lease out).
    assert {k: v for k, v in job.items() if k != "lease"} == view(svc, admin, job_id)


def test_a_cached_document_is_not_shown_to_another_organization(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    job_id = new_job(svc, admin)
    assert _get(client, f"/api/jobs/{job_id}", auth).status_code == 200
    assert len(svc.documents) == 1
    create_admin(svc.uow_factory, "globex", "boss@globex.test", "password-1")
    other = {"Authorization": f"Bearer {create_token(svc.uow_factory, 'boss@globex.test')}"}
    for url in (f"/api/jobs/{job_id}", f"/api/jobs/{job_id}/items"):
        assert _get(client, url, other).status_code == 404, url
    assert _get(client, f"/api/jobs/{job_id}", {"Authorization": "Bearer nope"}).status_code == 401


def test_a_client_with_the_current_version_gets_a_304_whatever_the_cache_holds(
    client: FlaskClient, svc: Services, admin: UserRecord, auth: dict[str, str]
) -> None:
    job_id = new_job(svc, admin)
    url = f"/api/jobs/{job_id}"
    stale = _get(client, url, auth)
    claim(svc, admin, job_id)
    current = _get(client, url, auth)
    # This process lost the current version (evicted) and holds an older one.
    svc.documents = DocumentCache()
    variant = lease_variant(svc.settings.lease_seconds, svc.settings.worker_dead_seconds)
    version = seen_version([stale.headers["ETag"].strip('"')], job_id, variant)
    assert version is not None
    svc.documents.put(
        job_id, variant, version, stale.get_data(as_text=True).rpartition(', "lease"')[0] + "}"
    )
    assert svc.documents.get(job_id, variant) is not None
    again = _get(client, url, auth, current.headers["ETag"])
    assert again.status_code == 304 and again.data == b""
    assert _get(client, url, auth).data == current.data
