"""A download answers its own type, or generic bytes to a client whose Accept prefers
those (the OpenAPI document lists both, for generated clients), on both databases."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.services import item_audio_key
from tests.helpers import new_job
from tests.integration.test_spending import run


def item_key(svc: Services, admin: UserRecord, job_id: int, item: dict[str, object]) -> str:
    return item_audio_key(svc.uow_factory, admin, job_id, int(str(item["id"])))


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        (None, "audio/mpeg"),
        ("*/*", "audio/mpeg"),
        ("application/octet-stream", "application/octet-stream"),
    ],
)
def test_an_item_download_answers_the_type_the_client_accepts(
    svc: Services,
    admin: UserRecord,
    client: FlaskClient,
    auth: dict[str, str],
    accept: str | None,
    content_type: str,
) -> None:
    job_id = new_job(svc, admin, n=1)
    item = run(svc, admin, job_id)["items"][0]
    headers = auth if accept is None else {**auth, "Accept": accept}
    with svc.storage.open(item_key(svc, admin, job_id, item)) as stored:
        audio = stored.read()
    with client.get(item["audio_url"], headers=headers) as answer:
        assert answer.status_code == 200
        assert answer.mimetype == content_type
        assert answer.data == audio
