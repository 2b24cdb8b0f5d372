"""A job's author and cover through the API, on both databases: stored, shown in the
job's JSON, bounded and checked, replaced and deleted without leaving files behind."""

from __future__ import annotations

import io

import pytest
from flask.testing import FlaskClient
from PIL import Image

from speechbatch.adapters.images import MAX_COVER_BYTES
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from tests.helpers import new_job
from tests.integration.test_render_tags import image


def job_json(client: FlaskClient, auth: dict[str, str], job_id: int) -> dict[str, object]:
    response = client.get(f"/api/jobs/{job_id}?items=none", headers=auth)
    assert response.status_code == 200
    body: dict[str, object] = response.get_json()
    return body


def test_author_is_set_at_creation_changed_and_cleared(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    created = client.post(
        "/api/jobs",
        json={"title": "Book", "voice": "alloy", "items": ["One."], "author": "  Mary Shelley "},
        headers=auth,
    )
    assert created.status_code == 201, created.get_json()
    job = created.get_json()
    assert (job["author"], job["cover_url"]) == ("Mary Shelley", None)
    etag = client.get(f"/api/jobs/{job['id']}", headers=auth).headers["ETag"]
    patched = client.patch(f"/api/jobs/{job['id']}", json={"author": "M. W. Shelley"}, headers=auth)
    assert patched.get_json()["author"] == "M. W. Shelley"
    # Nothing the provider is asked changed: the items stay as they were.
    assert patched.get_json()["progress"]["stale"] == 0
    assert client.get(f"/api/jobs/{job['id']}", headers=auth).headers["ETag"] != etag
    cleared = client.patch(f"/api/jobs/{job['id']}", json={"author": None}, headers=auth)
    assert cleared.get_json()["author"] is None


@pytest.mark.parametrize("author", [7, "a" * 201, "two\nlines", "nul\x00"])
def test_an_author_that_cannot_be_one_answers_422(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord, author: object
) -> None:
    job_id = new_job(svc, admin)
    response = client.patch(f"/api/jobs/{job_id}", json={"author": author}, headers=auth)
    assert response.status_code == 422
    assert response.get_json()["error"]["code"] == "validation_error"
    assert job_json(client, auth, job_id)["author"] is None


@pytest.mark.parametrize("kind", ["JPEG", "PNG"])
def test_a_cover_is_stored_shown_and_served(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord, kind: str
) -> None:
    job_id = new_job(svc, admin)
    assert client.get(f"/api/jobs/{job_id}/cover", headers=auth).status_code == 404
    put = client.put(f"/api/jobs/{job_id}/cover", data=image(kind), headers=auth)
    assert put.status_code == 200, put.get_json()
    assert job_json(client, auth, job_id)["cover_url"] == f"/api/jobs/{job_id}/cover"
    with client.get(f"/api/jobs/{job_id}/cover", headers=auth) as got:
        assert (got.status_code, got.mimetype) == (200, f"image/{kind.lower()}")
        assert got.get_data() == image(kind)


def _truncated_jpeg() -> bytes:
    return image("JPEG", (300, 300))[:400]


def _huge_png() -> bytes:
    out = io.BytesIO()
    Image.new("1", (5000, 10)).save(out, format="PNG")
    return out.getvalue()


@pytest.mark.parametrize(
    "body",
    [b"", b"GIF89a not a cover", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, _truncated_jpeg(),
     _huge_png(), b"\xff\xd8\xff" + b"\x00" * MAX_COVER_BYTES],
    ids=["empty", "gif", "broken-png", "truncated-jpeg", "too-wide", "too-large"],
)  # fmt: skip
def test_a_cover_that_is_not_a_bounded_jpeg_or_png_answers_422(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord, body: bytes
) -> None:
    job_id = new_job(svc, admin)
    response = client.put(f"/api/jobs/{job_id}/cover", data=body, headers=auth)
    assert response.status_code == 422, response.get_json()
    assert response.get_json()["error"]["code"] == "validation_error"
    assert job_json(client, auth, job_id)["cover_url"] is None


def test_a_replaced_cover_and_a_deleted_jobs_cover_leave_no_file(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    job_id = new_job(svc, admin)
    client.put(f"/api/jobs/{job_id}/cover", data=image("JPEG"), headers=auth)
    first = set(svc.storage.keys_older_than(-60))
    client.put(f"/api/jobs/{job_id}/cover", data=image("PNG"), headers=auth)
    second = set(svc.storage.keys_older_than(-60))
    (old,) = [k for k in first if k.startswith("covers/")]
    (new,) = [k for k in second if k.startswith("covers/")]
    assert old != new and new.endswith(".png")
    with svc.uow_factory(read_only=True) as uow:
        assert uow.spending.referenced_keys([old, new]) == {new}  # gc keeps the cover
    assert client.delete(f"/api/jobs/{job_id}", headers=auth).status_code == 204
    assert not svc.storage.exists(new)


def test_another_organizations_job_has_no_cover_to_read_or_write(
    client: FlaskClient, auth: dict[str, str], svc: Services, admin: UserRecord
) -> None:
    from speechbatch.services import create_token
    from tests.helpers import new_admin

    job_id = new_job(svc, admin)
    client.put(f"/api/jobs/{job_id}/cover", data=image("JPEG"), headers=auth)
    stranger = new_admin(svc, "other", "admin@other.test")
    theirs = {"Authorization": f"Bearer {create_token(svc.uow_factory, stranger.email)}"}
    assert client.get(f"/api/jobs/{job_id}/cover", headers=theirs).status_code == 404
    put = client.put(f"/api/jobs/{job_id}/cover", data=image("PNG"), headers=theirs)
    assert put.status_code == 404
    assert (
        client.patch(f"/api/jobs/{job_id}", json={"author": "x"}, headers=theirs).status_code == 404
    )
