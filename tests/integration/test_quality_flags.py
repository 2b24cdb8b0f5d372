"""Quality flags through a run, on both databases: the provider answers a tone of a
plausible length, silence, a cut-off clip and a tone that rambles on (audio made here),
and each item's ``duration_seconds`` and ``suspect`` come out of the finish; the job's
``progress.suspect``, ``?suspect=1`` and the job page's filter show the suspects; a
regenerate that brings good audio clears the flag, and the take keeps its measurement."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from speechbatch.adapters.repositories import UserRecord
from speechbatch.app import Services
from speechbatch.domain.quality import SILENT, TOO_LONG, TOO_SHORT
from tests.fakes import FakeProvider
from tests.integration.test_edits import done_job, generate
from tests.integration.test_pages import sign_in, text_of
from tests.integration.test_quality import tone, wav

FINE = "The quick brown fox jumps over the lazy dog."
SILENCE = "Please mind the gap between the train and the platform edge."
CUT_OFF = " ".join(
    [
        "Our next stop is Central Station, where you can change for the airport line.",
        "In 1492, Columbus sailed the ocean blue, and nobody asked him for a receipt.",
        "Thank you for listening; the next chapter begins after a short pause.",
        "Speechbatch turns long lists of sentences into audio files you can publish.",
    ]
)
RAMBLING = "Our next stop is Central Station."


def test_suspect_audio_is_flagged_counted_filtered_and_cleared(
    svc: Services, client: FlaskClient, auth: dict[str, str], admin: UserRecord,
    provider: FakeProvider,
) -> None:  # fmt: skip
    provider.audio = {
        FINE: wav(tone(3.0)),
        SILENCE: wav(tone(3.0) * 0),
        CUT_OFF: wav(tone(0.5)),  # a provider that dropped most of the text
        RAMBLING: wav(tone(60.0)),
    }
    job = done_job(svc, client, auth, admin, items=[FINE, SILENCE, CUT_OFF, RAMBLING])
    assert job["status"] == "COMPLETED"  # a suspect is not an error
    verdicts = [(i["suspect"], i["duration_seconds"]) for i in job["items"]]
    assert [v for v, _ in verdicts] == [None, SILENT, TOO_SHORT, TOO_LONG]
    assert [d for _, d in verdicts] == pytest.approx([3.0, 3.0, 0.5, 60.0], abs=0.01)
    assert job["progress"]["suspect"] == 3 and job["progress"]["stale"] == 0

    page = client.get(f"/api/jobs/{job['id']}/items?suspect=1", headers=auth).get_json()
    assert page["total"] == 3
    assert [i["suspect"] for i in page["items"]] == [SILENT, TOO_SHORT, TOO_LONG]
    sign_in(client)
    html = text_of(client.get(f"/jobs/{job['id']}?flag=suspect"))
    assert html.count('class="badge badge-suspect"') == 3 and FINE not in html

    silent_id = job["items"][1]["id"]
    provider.audio[SILENCE] = wav(tone(3.5))
    again = generate(svc, client, auth, admin, job["id"], "regenerate", {"items": [silent_id]})
    assert again["items"][1]["suspect"] is None
    assert again["items"][1]["duration_seconds"] == pytest.approx(3.5, abs=0.01)
    assert again["progress"]["suspect"] == 2
    takes = client.get(f"/api/jobs/{job['id']}/items/{silent_id}/takes", headers=auth).get_json()[
        "takes"
    ]
    assert [t["duration_seconds"] for t in takes] == pytest.approx([3.5, 3.0], abs=0.01)
