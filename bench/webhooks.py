"""Webhook deliveries: how fast a backlog goes out, and whether a hanging receiver slows
the others.

``gunicorn wsgi:app -w 2`` on PostgreSQL (every process runs its webhook senders) and
local receivers in this process, on loopback:

- A, the backlog: a webhook is disabled, EVENTS pings are recorded for it (they wait as
  pending deliveries), then it is enabled; the figure is the seconds from the enable to
  the last delivery's arrival at a fast receiver (every event, checked by webhook-id).
  Target: <= 10 s for 1,000 events.
- B, isolation: the same with FAST_EVENTS pings to the fast receiver, once alone and once
  while another webhook's HANG_EVENTS pings go to a receiver that never answers (each
  attempt holds a sender until the 10 s timeout). The figure is the fast receiver's time
  with the hanging one over its time alone (the two runs alternate, ROUNDS of each; the
  medians). Target: <= 1.5.

Usage: python bench/webhooks.py [--events 1000] [--fast-events 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.server
import threading
import time
from typing import Any

from _common import exit_on_sigterm, figure, median, write_results
from _http import Api, deployment

TARGET_SECONDS = 10.0
TARGET_RATIO = 1.5
HANG_EVENTS = 40


class Receiver:
    """A threaded local receiver: answers 204 at once, or (``hang``) never."""

    def __init__(self, hang: bool = False) -> None:
        self.arrivals: dict[str, float] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if hang:
                    time.sleep(60)
                    return
                with receiver.lock:
                    receiver.arrivals.setdefault(self.headers["webhook-id"], time.monotonic())
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self) -> None:
        """Stop listening."""
        self.server.shutdown()
        self.server.server_close()


def backlog(api: Api, url: str, events: int) -> tuple[int, set[str]]:
    """A disabled webhook with ``events`` pending pings: (its id, their webhook-ids)."""
    hook = api.call("POST", "/api/webhooks", {"url": url, "events": ["ping"]}, expect=201)
    api.call("PATCH", f"/api/webhooks/{hook['id']}", {"enabled": False})
    ids = set()
    with api.session() as session:
        for _ in range(events):
            answer = session.post(f"{api.base_url}/api/webhooks/{hook['id']}/ping", timeout=30)
            answer.raise_for_status()
            ids.add(answer.json()["event_id"])
    return int(hook["id"]), ids


def drain(api: Api, receiver: Receiver, events: int, with_hang: bool) -> float:
    """Seconds from enabling a backlog of ``events`` to its last arrival at ``receiver``."""
    hanging = Receiver(hang=True) if with_hang else None
    try:
        if hanging is not None:
            hang_id, _ = backlog(api, hanging.url, HANG_EVENTS)
            api.call("PATCH", f"/api/webhooks/{hang_id}", {"enabled": True})
            time.sleep(1.0)  # the hanging receiver holds its senders before the timing starts
        hook_id, ids = backlog(api, receiver.url, events)
        started = time.monotonic()
        api.call("PATCH", f"/api/webhooks/{hook_id}", {"enabled": True})
        deadline = started + 120
        while not ids <= set(receiver.arrivals):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(ids - set(receiver.arrivals))} events never arrived")
            time.sleep(0.02)
        seconds = max(receiver.arrivals[i] for i in ids) - started
    finally:
        if hanging is not None:
            api.call("PATCH", f"/api/webhooks/{hang_id}", {"enabled": False})
            hanging.stop()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--fast-events", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    exit_on_sigterm()
    receiver = Receiver()
    rounds: dict[str, list[float]] = {"alone": [], "with_hang": []}
    try:
        with deployment("http://127.0.0.1:9/v1", workers=2) as d:
            backlog_seconds = drain(d.api, receiver, args.events, with_hang=False)
            print(f"A: {args.events} events delivered in {backlog_seconds:.2f} s", flush=True)
            for i in range(args.rounds):
                for kind in ("alone", "with_hang") if i % 2 == 0 else ("with_hang", "alone"):
                    seconds = drain(d.api, receiver, args.fast_events, kind == "with_hang")
                    rounds[kind].append(seconds)
                    print(f"B round {i + 1} {kind}: {seconds:.2f} s", flush=True)
    finally:
        receiver.stop()
    ratio = median(rounds["with_hang"]) / median(rounds["alone"])
    figures = {
        "backlog": figure(
            f"{args.events} events to one receiver, seconds (2 processes)",
            backlog_seconds,
            f"<= {TARGET_SECONDS:g}",
            backlog_seconds <= TARGET_SECONDS,
        ),
        "isolation": figure(
            "fast receiver's time with a hanging one / alone",
            ratio,
            f"<= {TARGET_RATIO}",
            ratio <= TARGET_RATIO,
        ),
    }
    write_results(
        "webhooks",
        {"params": vars(args), "backlog_seconds": backlog_seconds, "rounds": rounds,
         "figures": figures},
    )  # fmt: skip


if __name__ == "__main__":
    main()
