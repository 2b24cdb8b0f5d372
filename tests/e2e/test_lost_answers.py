"""Client-side lost acknowledgements (issue 41): a creating call commits on the server but its
answer never reaches the client, which then calls again.

A loopback proxy in front of gunicorn (``tests/support/lost_answers.py``) reads the server's
whole answer, so the work has committed, then resets the client's connection. The client
retries at once: with the same ``Idempotency-Key`` where the contract has one (job, render
and export creation), without one where it has none (Generate, Retry, Regenerate) or when
the client did not send one. What the retry must get, per CONTRACT.md:

- a reused key: the lost answer itself (status and body), marked ``Idempotent-Replayed``,
  and nothing created again;
- Generate, Retry and Regenerate while their run goes on: 409 ``already_generating`` (the
  running run), then ``nothing_to_generate`` once it ended;
- a render or an export without a key while the first is building: 409 ``render_in_progress``
  / ``export_in_progress``.

Deterministic: the provider holds one text's calls (``ChaosFakeProvider.hold``) and the
builders' reads of item audio wait on a file (``held_reads_server``) until the test has
made every retry; the proxy answers the client only after the server's answer was whole.
Nothing runs twice: each text reaches the provider once per run, each run is one row, the
ledger bills what the provider received (no character twice), one render and one export.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import Engine, text

from tests.chaos.chaos_provider import Answer, ChaosFakeProvider
from tests.e2e.conftest import DEFAULT_LATENCY
from tests.support.lost_answers import LosingProxy, LostAnswer
from tests.support.server import ApiClient, GunicornServer, wait_until
from tests.support.slow_reads import held_reads_server

TIMEOUT = 90.0


@pytest.fixture
def fake_provider() -> Iterator[ChaosFakeProvider]:
    """The fake provider that can hold a text's calls, answering decodable MP3 tones."""
    fake = ChaosFakeProvider(latency=DEFAULT_LATENCY / 3, api_key="test-key", real_audio=True)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def hold(tmp_path: Path) -> Path:
    """While this file exists, renders and exports wait before each read of item audio."""
    return tmp_path / "hold-reads"


@pytest.fixture
def proxy(env: dict[str, str], tmp_path: Path, hold: Path) -> Iterator[LosingProxy]:
    """Gunicorn (2 workers x 2 threads) behind the proxy that loses answers."""
    server: GunicornServer = held_reads_server(
        env, tmp_path, hold=hold, workers=2, threads=2, name="lost-answers"
    )
    server.start()
    losing = LosingProxy(server.port).start()
    try:
        yield losing
    finally:
        losing.stop()
        server.stop(graceful=False)


class Client:
    """Calls through the proxy; ``lost`` makes a call whose answer is lost."""

    def __init__(self, proxy: LosingProxy, token: str) -> None:
        self.proxy = proxy
        self.api = ApiClient(proxy.base_url, token, timeout=30)

    def call(
        self, method: str, path: str, body: Any = None, key: str | None = None
    ) -> requests.Response:
        """One call on a new connection, with ``Idempotency-Key: key`` when given."""
        headers = {"Authorization": f"Bearer {self.api.token}"}
        if key is not None:
            headers["Idempotency-Key"] = key
        return requests.request(
            method, self.api.base_url + path, json=body, headers=headers, timeout=30
        )

    def lost(self, method: str, path: str, body: Any = None, key: str | None = None) -> LostAnswer:
        """The call, whose answer the proxy reads in full and loses: the client sees its
        connection reset; the answer the server sent."""
        before = len(self.proxy.lost)
        self.proxy.lose_next()
        with pytest.raises(requests.ConnectionError):
            self.call(method, path, body, key)
        assert len(self.proxy.lost) == before + 1, "the proxy lost no answer"
        return self.proxy.lost[-1]

    def usage(self) -> dict[str, Any]:
        """GET /api/usage."""
        response = self.call("GET", "/api/usage")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


def refused(response: requests.Response, code: str) -> None:
    """The answer is 409 with error ``code``."""
    assert response.status_code == 409, (response.status_code, response.text[:500])
    assert response.json()["error"]["code"] == code, response.text[:500]


def replayed(response: requests.Response, lost: LostAnswer) -> None:
    """The retry with the same key got the lost answer again, and said so."""
    assert response.status_code == lost.status, (response.status_code, response.text[:500])
    assert response.json() == lost.json()
    assert response.headers.get("Idempotent-Replayed") == "true"


def lost_run(client: Client, fake: ChaosFakeProvider, job_id: int, path: str, held: str) -> None:
    """``POST path`` of the job with its answer lost while ``held``'s call is held; the
    client's retry meets the running run (409 already_generating); then the run ends."""
    fake.hold(held)
    answer = client.lost("POST", f"/api/jobs/{job_id}/{path}")
    assert answer.status == 202, answer.body
    assert answer.json()["status"] == "GENERATING"
    refused(client.call("POST", f"/api/jobs/{job_id}/{path}"), "already_generating")
    view = client.api.get_job(job_id)
    assert view["status"] == "GENERATING" and view["attempt"] == answer.json()["attempt"]
    wait_until(lambda: fake.calls(held) > 0, TIMEOUT, what=f"the held call for {held!r}")
    fake.release(held)
    client.api.wait_job(job_id, lambda j: j["status"] != "GENERATING", TIMEOUT)


def test_generate_retry_and_regenerate_answers_lost_run_once(
    proxy: LosingProxy, api_token: str, fake_provider: ChaosFakeProvider
) -> None:
    client = Client(proxy, api_token)
    before = client.usage()
    texts = [f"a lost answer line {n}" for n in range(4)]
    bad = texts[1]
    fake_provider.program(bad, Answer.error(400, "refused once"))

    # A job created with a key, its answer lost: the retry gets the same job, one job.
    body = {"title": "lost answers", "voice": "alloy", "items": texts}
    created = client.lost("POST", "/api/jobs", body, key="job-1")
    assert created.status == 201, created.body
    replayed(client.call("POST", "/api/jobs", body, key="job-1"), created)
    job_id = int(created.json()["id"])
    listed = client.call("GET", "/api/jobs").json()
    assert [j["id"] for j in listed["jobs"] if j["title"] == "lost answers"] == [job_id]

    # Generate, lost: the bad line fails, the run ends FAILED.
    lost_run(client, fake_provider, job_id, "generate", held=texts[3])
    assert client.api.get_job(job_id)["status"] == "FAILED"
    # Retry (Generate of a failed job), lost: only the failed line is sent again.
    lost_run(client, fake_provider, job_id, "generate", held=bad)
    assert client.api.get_job(job_id)["status"] == "COMPLETED"
    refused(client.call("POST", f"/api/jobs/{job_id}/generate"), "nothing_to_generate")
    # Regenerate, lost: every line once more, one run.
    lost_run(client, fake_provider, job_id, "regenerate", held=texts[0])
    view = client.api.get_job(job_id)
    assert view["status"] == "COMPLETED"
    refused(client.call("POST", f"/api/jobs/{job_id}/generate"), "nothing_to_generate")

    runs = sorted((r["attempt"], r["kind"], r["outcome"]) for r in view["runs"])
    assert runs == [
        (1, "generate", "FAILED"),
        (2, "generate", "COMPLETED"),
        (3, "regenerate", "COMPLETED"),
    ], view["runs"]
    # Each text reached the provider once per run that asked for it.
    assert fake_provider.counts() == {texts[0]: 2, bad: 3, texts[2]: 2, texts[3]: 2}
    after = client.usage()
    billed = after["billed_characters"] - before["billed_characters"]
    calls = after["provider_calls"] - before["provider_calls"]
    in_doubt = after.get("in_doubt_characters", 0) - before.get("in_doubt_characters", 0)
    assert (billed, calls, in_doubt) == (fake_provider.received_characters(), 9, 0)


def test_render_and_export_answers_lost_create_once(
    proxy: LosingProxy,
    api_token: str,
    fake_provider: ChaosFakeProvider,
    hold: Path,
    db: Engine,
) -> None:
    client = Client(proxy, api_token)
    job = client.api.create_job([f"a rendered line {n}" for n in range(3)], title="to render")
    assert client.api.generate(job["id"]).status_code == 202
    client.api.wait_job(job["id"], lambda j: j["status"] == "COMPLETED", TIMEOUT)
    hold.touch()  # the builders wait before their first read of item audio

    path, body = f"/api/jobs/{job['id']}/renders", {"format": "mp3"}
    render = client.lost("POST", path, body, key="render-1")
    assert render.status == 202, render.body
    replayed(client.call("POST", path, body, key="render-1"), render)
    refused(client.call("POST", path, body), "render_in_progress")
    # The same key with another body is another request, not a replay.
    other = client.call("POST", path, {"format": "m4b"}, key="render-1")
    assert other.status_code == 422 and other.json()["error"]["code"] == "idempotency_key_reused"

    export = client.lost("POST", "/api/exports", None, key="export-1")
    assert export.status == 202, export.body
    replayed(client.call("POST", "/api/exports", None, key="export-1"), export)
    refused(client.call("POST", "/api/exports"), "export_in_progress")

    hold.unlink()
    render_view = _settled(client, f"{path}/{render.json()['id']}")
    export_view = _settled(client, f"/api/exports/{export.json()['id']}")
    assert (render_view["status"], export_view["status"]) == ("COMPLETED", "COMPLETED")
    # Later repeats of a used key still answer what the first call answered.
    replayed(client.call("POST", path, body, key="render-1"), render)
    replayed(client.call("POST", "/api/exports", None, key="export-1"), export)
    renders = client.call("GET", path).json()
    assert [r["id"] for r in renders["renders"]] == [render.json()["id"]]
    with db.connect() as conn:
        rows: list[int] = list(conn.execute(text("SELECT id FROM exports")).scalars())
    assert rows == [export.json()["id"]]


def _settled(client: Client, path: str) -> dict[str, Any]:
    def ended() -> dict[str, Any]:
        view: dict[str, Any] = client.call("GET", path).json()
        return view if view["status"] != "RUNNING" else {}

    return wait_until(ended, TIMEOUT, what=f"{path} ended")
