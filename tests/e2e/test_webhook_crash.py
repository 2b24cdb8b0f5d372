"""Webhook deliveries survive SIGKILL (real gunicorn, both databases).

1. A worker is SIGKILLed while the receiver holds its delivery (the POST hangs): the
   delivery is claimed again once the dead worker stops heartbeating and its attempt can
   no longer be in flight, and delivered with the same ``webhook-id``, within
   RESENT_WITHIN and a margin.
2. A worker is SIGKILLed right after a job ended, while the receiver is down: the event
   was written with the job's end, so it is delivered once the receiver is up.
Every request the receiver gets is verified with ``standardwebhooks``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.conftest import ServerFactory
from tests.support.server import WORKER_DEAD_SECONDS, ApiClient, GunicornServer, free_port
from tests.support.webhook_receiver import Receiver

SCHEDULE = {"WEBHOOK_RETRY_SCHEDULE": "0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5"}
# A dead worker's delivery goes again once its heartbeat is stale and its attempt (the
# contract's 10 s, and 2 s before it for the claim's commit and the lookup) has ended.
RESENT_WITHIN = max(WORKER_DEAD_SECONDS, 10.0 + 2.0)


@pytest.fixture
def server(spawn_server: ServerFactory, env: dict[str, str]) -> GunicornServer:
    """One gunicorn worker whose failed deliveries are retried every half second."""
    extra = {f"SPEECHBATCH_{k}": v for k, v in SCHEDULE.items()}
    return spawn_server(workers=1, threads=4, extra_env=extra)


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    """Receivers the test starts; stopped at its end."""
    started: list[Receiver] = []
    yield started
    for r in started:
        r.stop()


def _webhook(api: ApiClient, url: str, events: list[str]) -> tuple[int, str]:
    answer = api.request("POST", "/api/webhooks", {"url": url, "events": events})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"], answer.json()["secret"]


def _delivered(api: ApiClient, webhook_id: int) -> Callable[[], list[dict[str, object]]]:
    def check() -> list[dict[str, object]]:
        found = api.request("GET", f"/api/webhooks/{webhook_id}/deliveries").json()
        deliveries: list[dict[str, object]] = found["deliveries"]
        return deliveries if deliveries and deliveries[0]["status"] == "DELIVERED" else []

    return check


def test_a_delivery_held_by_a_killed_worker_is_sent_again(
    server: GunicornServer,
    api_for: Callable[[GunicornServer], ApiClient],
    receivers: list[Receiver],
) -> None:
    api = api_for(server)
    receiver = Receiver(["hang"], hang_seconds=60)
    receivers.append(receiver)
    webhook_id, receiver.secret = _webhook(api, receiver.url, ["job.completed"])
    ping = api.request("POST", f"/api/webhooks/{webhook_id}/ping")
    assert ping.status_code == 202
    api.wait_for(lambda: receiver.count() == 1, timeout=10)
    (worker,) = server.worker_pids()
    server.kill_worker(worker)
    killed_at = time.monotonic()
    server.wait_for_workers(exclude={worker})
    (delivery,) = api.wait_for(_delivered(api, webhook_id), timeout=RESENT_WITHIN + 20)
    assert receiver.count() == 2
    assert receiver.received[1].at - killed_at < RESENT_WITHIN + 10
    assert receiver.ids() == [ping.json()["event_id"]] * 2
    assert all(r.verified for r in receiver.received)
    assert delivery["attempts"] == 2


def test_an_event_of_a_job_that_ended_just_before_a_kill_is_delivered(
    server: GunicornServer,
    api_for: Callable[[GunicornServer], ApiClient],
    receivers: list[Receiver],
) -> None:
    api = api_for(server)
    port = free_port()  # nothing listens there yet: the receiver is down
    url = f"http://127.0.0.1:{port}/hook"
    webhook_id, secret = _webhook(api, url, ["job.completed", "job.failed"])
    job = api.create_job(["one", "two"])
    assert api.generate(job["id"]).status_code == 202
    api.wait_job(job["id"], lambda j: j["status"] == "COMPLETED", timeout=30)
    server.kill_workers()
    receiver = Receiver(port=port)
    receiver.secret = secret
    receivers.append(receiver)
    server.wait_for_workers()
    api.wait_for(_delivered(api, webhook_id), timeout=WORKER_DEAD_SECONDS + 20)
    assert receiver.received and all(r.verified for r in receiver.received)
    assert len(set(receiver.ids())) == 1
    request = receiver.received[0]
    assert request.payload is not None and request.payload["type"] == "job.completed"
    assert request.payload["data"]["job"]["id"] == job["id"]
    assert request.payload["data"]["run"]["outcome"] == "COMPLETED"
