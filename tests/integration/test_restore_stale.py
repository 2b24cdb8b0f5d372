"""A restore and the stale pass judge "stale" by one rule, on SQLite and PostgreSQL: the
mark a restore writes is the one the next pass leaves.

A take is stale when what would be sent now differs from what it was made from: its
text, the job's voice or options, or the spoken text the rules give now (the contract's
"Stale"). Two takes that restore used to judge otherwise, by comparing fingerprints:
one made before the deployment's provider model changed (the fingerprint mixes in the
provider's identity), and one whose fingerprint is unknown (takes backfilled from items
made before fingerprints existed). Both say exactly what would be sent now."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient
from sqlalchemy import update

from speechbatch.adapters.models import Take
from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from tests.fakes import FakeProvider
from tests.helpers import concrete, view
from tests.integration.test_edits import done_job, generate
from tests.integration.test_lexicon import SQL, passes_done, put


def two_takes(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord
) -> tuple[int, str]:
    """A DONE job whose first item has two takes (the second current): (job, item URL)."""
    job = done_job(svc, client, auth, admin)
    url = f"/api/jobs/{job['id']}/items/{job['items'][0]['id']}"
    assert client.patch(url, json={"text": "First line, again."}, headers=auth).status_code == 200
    generate(svc, client, auth, admin, job["id"])
    return job["id"], url


def restored_then_passed(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord, job_id: int,
    url: str,
) -> tuple[bool, bool]:  # fmt: skip
    """Restore take 1, then let a rule change's stale pass run: the item's stale mark
    after each."""
    answer: Any = client.post(f"{url}/takes/1/restore", headers=auth)
    assert answer.status_code == 200, answer.get_json()
    after_restore = bool(answer.get_json()["items"][0]["stale"])
    # A rule that changes none of this job's lines: its pass judges every DONE line.
    assert put(client, auth, [SQL]).status_code == 200
    passes_done(svc, admin)
    return after_restore, bool(view(svc, admin, job_id)["items"][0]["stale"])


def test_a_take_made_before_the_provider_model_changed_is_judged_alike(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    job_id, url = two_takes(svc, client, auth, admin)
    provider.model = "tts-2"  # type: ignore[attr-defined]  # the deployment's new model
    assert restored_then_passed(svc, client, auth, admin, job_id, url) == (False, False)


def test_a_take_without_a_fingerprint_is_judged_alike(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord
) -> None:
    job_id, url = two_takes(svc, client, auth, admin)
    with concrete(svc.uow_factory)() as uow:
        uow.session.execute(update(Take).where(Take.take == 1).values(fingerprint=None))
        uow.commit()
    assert restored_then_passed(svc, client, auth, admin, job_id, url) == (False, False)


def test_a_take_the_rules_now_speak_otherwise_is_stale_for_both(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord
) -> None:
    job_id, url = two_takes(svc, client, auth, admin)
    assert put(client, auth, [{"match": "First", "say": "1st"}]).status_code == 200
    passes_done(svc, admin)
    answer: Any = client.post(f"{url}/takes/1/restore", headers=auth)
    assert answer.get_json()["items"][0]["stale"] is True
    assert put(client, auth, [{"match": "First", "say": "1st"}, SQL]).status_code == 200
    passes_done(svc, admin)
    assert view(svc, admin, job_id)["items"][0]["stale"] is True
