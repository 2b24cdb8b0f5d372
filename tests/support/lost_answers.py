"""A loopback TCP proxy in front of the app that can lose an HTTP answer on its way back.

A client-side lost acknowledgement: the request reaches the server, which does the work,
commits and answers; the answer never reaches the client, whose connection is reset. The
proxy reads the whole answer first (its headers and its Content-Length body), so when the
client sees the reset the server has already committed: the client's retry comes after the
first request's transaction, every time. The lost answers are kept, to compare with what a
retry gets.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LostAnswer:
    """An answer the proxy read from the server and never passed on."""

    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


class LosingProxy:
    """``http://127.0.0.1:PORT`` forwarding to ``upstream_port``; ``lose_next()`` makes
    the next connection's first answer lost (read in full, then the client reset)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.lost: list[LostAnswer] = []
        self._to_lose = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="losing-proxy", daemon=True)

    @property
    def base_url(self) -> str:
        """Where the client goes."""
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def start(self) -> LosingProxy:
        """Serve from a daemon thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting (connections being served end with their peers)."""
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(5)

    def lose_next(self) -> None:
        """The answer to the next connection's request is read from the server and lost."""
        with self._lock:
            self._to_lose += 1

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                lose, self._to_lose = self._to_lose > 0, max(self._to_lose - 1, 0)
            threading.Thread(target=self._serve, args=(client, lose), daemon=True).start()

    def _serve(self, client: socket.socket, lose: bool) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=60)
        pump = threading.Thread(target=_pump, args=(client, upstream), daemon=True)
        pump.start()
        try:
            if lose:
                answer = _read_answer(upstream)
                with self._lock:
                    self.lost.append(answer)
                _reset(client, pump)
            else:
                _pump(upstream, client)
        finally:
            with contextlib.suppress(OSError):
                upstream.close()
            with contextlib.suppress(OSError):
                client.close()


def _pump(source: socket.socket, target: socket.socket) -> None:
    """Copy bytes until either side closes."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)


def _read_answer(upstream: socket.socket) -> LostAnswer:
    """One whole HTTP answer (the app sends a Content-Length) from ``upstream``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = upstream.recv(65536)
        if not chunk:
            raise ConnectionError(f"the server closed before its headers: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = upstream.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed before the end of its body")
        body += chunk
    return LostAnswer(int(status_line.split()[1]), headers, body[:length])


def _reset(client: socket.socket, pump: threading.Thread) -> None:
    """Close with an RST: the client's read fails, nothing of the answer arrives. (The pump
    blocked in the client's recv is woken first: a socket closed while another thread
    reads it stays open in the kernel until that read returns.)"""
    with contextlib.suppress(OSError):
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.shutdown(socket.SHUT_RD)
    pump.join(5)
    with contextlib.suppress(OSError):
        client.close()
