"""Loopback listeners that see what an HTTP server would hide: whether a connection was
made at all, and an answer sent one byte at a time (plain or over TLS)."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import time


class ConnectionCounter:
    """A listening socket that never accepts: ``connected()`` says whether any client
    completed a TCP handshake with it (the kernel queues it whether or not we accept)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.bind((host, 0))
        self._sock.listen(16)
        self.port: int = self._sock.getsockname()[1]

    def connected(self) -> bool:
        """Whether a connection is waiting in the backlog."""
        readable, _, _ = select.select([self._sock], [], [], 0.2)
        return bool(readable)

    def close(self) -> None:
        """Stop listening."""
        self._sock.close()


class DripReceiver:
    """Reads a request, then answers it one byte every ``interval`` seconds; counts the
    connections, and the most that were open at once."""

    ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"

    def __init__(self, interval: float, tls: ssl.SSLContext | None = None) -> None:
        self.interval = interval
        self._tls = tls
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self.connections = 0
        self.open_now = 0
        self.most_open = 0
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self.open_now += 1
                self.most_open = max(self.most_open, self.open_now)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            if self._tls is not None:
                conn = self._tls.wrap_socket(conn, server_side=True)
            if not self._read_request(conn):
                return
            for n in range(len(self.ANSWER)):
                if self._stopped.wait(self.interval):
                    return
                conn.sendall(self.ANSWER[n : n + 1])
        except OSError:
            return  # the client gave up: what it is meant to do
        finally:
            with self._lock:
                self.open_now -= 1
            with contextlib.suppress(OSError):
                conn.close()

    @staticmethod
    def _read_request(conn: socket.socket) -> bool:
        """Read the whole request (head and body: a socket closed with unread data
        resets the connection, and the client loses the answer it had not read yet)."""
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            request += chunk
        head, _, body = request.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n")
             if line.lower().startswith(b"content-length:")),
            0,
        )  # fmt: skip
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            body += chunk
        return True

    def seconds_to_answer(self) -> float:
        """How long the whole answer takes to drip out."""
        return len(self.ANSWER) * self.interval

    def stop(self) -> None:
        """Stop answering and listening."""
        self._stopped.set()
        self._listener.close()
        time.sleep(0)
