"""A local stand-in for an OpenAI-compatible provider, for tests of the HTTP transport.

It counts the TCP connections it accepted, the requests it read in full (their paths and
the characters of their ``input``), and per request (``mode(text)``) answers audio,
resets the connection right after reading the request (RST: the client loses the
answer), or hangs past the client's timeout. With a ``together`` count every request
waits until that many are in flight together. Loopback only.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

AUDIO = b"\xff\xf3\x84\xc4" + b"\x00" * 200
Mode = Callable[[str], str]  # the input text -> "ok", "reset" or "hang"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real provider
    disable_nagle_algorithm = True
    server: LocalProvider

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        text = str(json.loads(body or b"{}").get("input", ""))
        with self.server.lock:
            self.server.paths.append(self.path)
            self.server.received += len(text)
        mode = self.server.mode(text)
        if mode == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if mode == "hang":
            self.server.stopped.wait(self.server.hang_seconds)
            self.close_connection = True
            return
        if self.server.together is not None:
            self.server.together.wait(5)
        self.send_response(200)
        self.send_header("Content-Type", "audio/mpeg")
        self.send_header("Content-Length", str(len(AUDIO)))
        self.end_headers()
        self.wfile.write(AUDIO)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


class LocalProvider(ThreadingHTTPServer):
    """The server, serving on a thread of its own from construction until ``stop()``."""

    daemon_threads = True

    def __init__(
        self,
        tls: ssl.SSLContext | None = None,
        together: int | None = None,
        mode: Mode = lambda text: "ok",
        hang_seconds: float = 3.0,
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.scheme = "http" if tls is None else "https"
        self.mode = mode
        self.hang_seconds = hang_seconds
        self.lock = threading.Lock()
        self.connections = 0
        self.paths: list[str] = []
        self.received = 0  # characters of the inputs of the requests read in full
        self.together = None if together is None else threading.Barrier(together)
        self.stopped = threading.Event()
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}/v1"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a reset connection is the point of some tests."""

    def stop(self) -> None:
        self.stopped.set()
        self.shutdown()
        self.server_close()


def serving() -> Iterator[Callable[..., LocalProvider]]:
    """A fixture's body: start servers for the test (``serve(tls, together, mode)``);
    all stop at its end."""
    started: list[LocalProvider] = []

    def serve(*args: Any, **kwargs: Any) -> LocalProvider:
        started.append(LocalProvider(*args, **kwargs))
        return started[-1]

    yield serve
    for server in started:
        server.stop()


def refusing_url() -> str:
    """A loopback URL whose port nobody listens on: connections to it are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
