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
  medians). Target: <= 1.5. At a round's end the hanging receiver closes the connections
  it holds, so its attempts end there: no round starts with an earlier round's attempts
  still holding senders (a second hanging webhook that the figure does not describe).

``--compare SRC`` runs a second server beside the first whose ``src`` is another folder
(e.g. an older commit's, from ``git archive``), first on ``PYTHONPATH``; each round of B
runs on both, in alternating order: an A/B in the same minutes.

Usage: python bench/webhooks.py [--events 1000] [--fast-events 300] [--rounds 3]
       [--compare /tmp/old/src]
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from _common import exit_on_sigterm, figure, median, write_results
from _http import Api, Deployment, deployment

TARGET_SECONDS = 10.0
TARGET_RATIO = 1.5
HANG_EVENTS = 40


class Receiver:
    """A threaded local receiver: answers 204 at once, or (``hang``) never: it holds each
    request until it is stopped, then closes its connection."""

    def __init__(self, hang: bool = False) -> None:
        self.arrivals: dict[str, float] = {}
        self.lock = threading.Lock()
        self.held = 0  # requests held unanswered now
        self.released = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if hang:
                    receiver.hold()
                    self.close_connection = True
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

    def hold(self) -> None:
        """Answer nothing until stopped (or 60 s)."""
        with self.lock:
            self.held += 1
        try:
            self.released.wait(60)
        finally:
            with self.lock:
                self.held -= 1

    def stop(self) -> None:
        """Stop listening, and let go of the requests held: their connections close, and
        the attempts that sent them end (within 5 s)."""
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        deadline = time.monotonic() + 5
        while self.held and time.monotonic() < deadline:
            time.sleep(0.01)


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


@contextlib.contextmanager
def serving(src: Path | None) -> Iterator[Deployment]:
    """The deployment of this tree, or (``src``) of another ``src`` first on PYTHONPATH."""
    with contextlib.ExitStack() as stack:
        # The server's environment is read as it starts: only its start sees the path.
        with mock.patch.dict(os.environ, {"PYTHONPATH": str(src)} if src else {}):
            d = stack.enter_context(deployment("http://127.0.0.1:9/v1", workers=2))
        yield d


def isolation_rounds(
    apis: dict[str, Api], receiver: Receiver, events: int, rounds: int
) -> dict[str, dict[str, list[float]]]:
    """B's rounds on each side's server: the seconds alone and with the hang, per side.
    The kinds alternate from round to round, and so do the sides."""
    found: dict[str, dict[str, list[float]]] = {
        side: {"alone": [], "with_hang": []} for side in apis
    }
    for i in range(rounds):
        kinds = ("alone", "with_hang") if i % 2 == 0 else ("with_hang", "alone")
        for side in list(apis) if i % 2 == 0 else list(apis)[::-1]:
            for kind in kinds:
                seconds = drain(apis[side], receiver, events, kind == "with_hang")
                found[side][kind].append(seconds)
                print(f"B round {i + 1} {side} {kind}: {seconds:.2f} s", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--fast-events", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", type=Path, default=None)
    args = parser.parse_args()
    exit_on_sigterm()
    receiver = Receiver()
    sources = {"this": None, "compare": args.compare} if args.compare else {"this": None}
    try:
        with contextlib.ExitStack() as stack:
            apis = {side: stack.enter_context(serving(src)).api for side, src in sources.items()}
            backlog = {}
            for side, api in apis.items():
                backlog[side] = drain(api, receiver, args.events, with_hang=False)
                print(
                    f"A {side}: {args.events} events delivered in {backlog[side]:.2f} s", flush=True
                )
            rounds = isolation_rounds(apis, receiver, args.fast_events, args.rounds)
    finally:
        receiver.stop()
    ratios = {
        side: median(kinds["with_hang"]) / median(kinds["alone"]) for side, kinds in rounds.items()
    }
    figures = {
        "backlog": figure(
            f"{args.events} events to one receiver, seconds (2 processes)",
            backlog["this"],
            f"<= {TARGET_SECONDS:g}",
            backlog["this"] <= TARGET_SECONDS,
        ),
        "isolation": figure(
            "fast receiver's time with a hanging one / alone",
            ratios["this"],
            f"<= {TARGET_RATIO}",
            ratios["this"] <= TARGET_RATIO,
        ),
    }
    if "compare" in ratios:
        print(f"compare ({args.compare}): backlog {backlog['compare']:.2f} s, "
              f"isolation {ratios['compare']:.3f}")  # fmt: skip
    write_results(
        "webhooks",
        {"params": {**vars(args), "compare": str(args.compare) if args.compare else None},
         "backlog_seconds": backlog, "rounds": rounds, "ratios": ratios, "figures": figures},
    )  # fmt: skip


if __name__ == "__main__":
    main()
