"""A local webhook receiver for tests and benchmarks, scripted per attempt.

Every request is recorded (its headers, body and arrival time) and verified with the
``standardwebhooks`` package, the reference a real receiver uses. Each request takes the
next step of the script; when the script is used up, the default answers. Steps:
``200`` (or any status), ``"hang"`` (answer nothing for ``hang_seconds``), ``"redirect"``
(a 302 to another path), ``"refuse"`` (answer 500, then close the listening socket for
``refuse_seconds``: the next attempt's connection is refused).
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass
class Received:
    """One request the receiver got."""

    at: float
    headers: dict[str, str]
    body: bytes
    verified: bool
    step: object
    payload: dict[str, Any] | None = field(default=None)


class Receiver:
    """A threaded HTTP receiver on 127.0.0.1 whose answers follow a script."""

    def __init__(
        self,
        script: Iterable[object] = (),
        *,
        default: object = 200,
        hang_seconds: float = 3.0,
        refuse_seconds: float = 1.0,
        port: int = 0,
    ) -> None:
        self.script = list(script)
        self.default = default
        self.hang_seconds = hang_seconds
        self.refuse_seconds = refuse_seconds
        self.secret: str | None = None
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._server = self._serve(port)
        self.port = self._server.server_address[1]

    @property
    def url(self) -> str:
        """The receiver's URL (by IP address)."""
        return f"http://127.0.0.1:{self.port}/hook"

    def _serve(self, port: int) -> http.server.ThreadingHTTPServer:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                step = receiver._record(dict(self.headers.items()), body)
                if step == "hang":
                    time.sleep(receiver.hang_seconds)
                    self.close_connection = True
                    return
                if step == "redirect":
                    self.send_response(302)
                    self.send_header("Location", "/elsewhere")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 500 if step == "refuse" else int(str(step))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                if step == "refuse":
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if step == "refuse":
                    threading.Thread(target=receiver._refuse_for_a_while, daemon=True).start()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def _record(self, headers: dict[str, str], body: bytes) -> object:
        verified, payload = False, None
        if self.secret is not None:
            try:
                payload = Webhook(self.secret).verify(body, headers)
                verified = True
            except WebhookVerificationError:
                verified = False
        with self._lock:
            step = self.script.pop(0) if self.script else self.default
            self.received.append(Received(time.monotonic(), headers, body, verified, step, payload))
        return step

    def _refuse_for_a_while(self) -> None:
        self.stop()
        time.sleep(self.refuse_seconds)
        self._server = self._serve(self.port)

    def ids(self) -> list[str]:
        """The ``webhook-id`` of every request, in arrival order."""
        with self._lock:
            return [r.headers.get("webhook-id", "") for r in self.received]

    def count(self) -> int:
        """How many requests arrived."""
        with self._lock:
            return len(self.received)

    def stop(self) -> None:
        """Stop listening (a connection is refused from now on)."""
        self._server.shutdown()
        self._server.server_close()
