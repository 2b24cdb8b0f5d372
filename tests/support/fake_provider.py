"""A local fake of an OpenAI-compatible text-to-speech server, for process-level tests.

In process::

    with FakeProvider(latency=0.3) as fake:        # or fake = FakeProvider().start()
        env["SPEECHBATCH_TTS_BASE_URL"] = fake.url  # http://127.0.0.1:PORT/v1
        ...
        assert fake.calls("hello") == 1

As a separate process (prints the port on its first stdout line, serves until SIGTERM/SIGINT)::

    python -m tests.support.fake_provider --port 0 --latency 0.3

and drive it over HTTP with :class:`RemoteFakeProvider` (same counting/fault API).

Endpoints:
- ``POST /v1/audio/speech`` JSON ``{"model", "input", "voice", "response_format"}`` -> 200
  ``audio/mpeg`` bytes from :func:`fake_audio` (deterministic per input text). Every call is
  counted per input text when it arrives (a billed call), whatever its answer.
- ``GET /stats`` -> ``{"total": int, "calls": {text: int}, "in_flight": int,
  "max_in_flight": int, "latency": float, "pending_faults": int}``.
- control (for the script mode): ``POST /control/reset``, ``POST /control/latency``
  ``{"seconds"}``, ``POST /control/fail_next`` ``{"n", "status", "retry_after"}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import ssl
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any

import requests

SPEECH_PATH = "/v1/audio/speech"
# An ID3v2.4 header with an empty tag, then one MPEG-1 Layer III frame header (128 kbit/s,
# 44.1 kHz): enough to look like MP3 to a sniffer.
_MP3_PREFIX = b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff\xfb\x90\x64"


def fake_audio(text: str) -> bytes:
    """The deterministic audio bytes the fake answers for ``text`` (encodes its sha256)."""
    return _MP3_PREFIX + hashlib.sha256(text.encode("utf-8")).digest()


@dataclass(frozen=True)
class Fault:
    """One programmed failure answer."""

    status: int
    retry_after: str | None = None
    message: str = "fake provider fault"


class _State:
    """Counters, latency and faults, shared by the handler threads."""

    def __init__(self, latency: float, api_key: str | None) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.latency = latency
        self.api_key = api_key
        self.faults: deque[Fault] = deque()
        self.in_flight = 0
        # The most calls ever in flight at once, and when each call arrived (time.time()).
        self.max_in_flight = 0
        self.starts: list[tuple[str, float]] = []

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "total": sum(self.counts.values()),
                "calls": dict(self.counts),
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "latency": self.latency,
                "pending_faults": len(self.faults),
            }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "FakeTTS/1.0"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: the test output is for the app."""

    # -- plumbing ---------------------------------------------------------------------------
    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            # The client went away (a SIGKILLed worker): nothing to answer to.
            self.close_connection = True

    def _json(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers=headers)

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self._json(status, {"error": {"message": message, "type": "fake_error"}}, headers)

    # -- routes -----------------------------------------------------------------------------
    def do_GET(self) -> None:
        if self.path == "/stats":
            self._json(200, self.server.state.stats())
        else:
            self._error(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        raw = self._body()
        if self.path == SPEECH_PATH:
            self._speech(raw)
        elif self.path.startswith("/control/"):
            self._control(self.path.removeprefix("/control/"), raw)
        else:
            self._error(404, f"no route POST {self.path}")

    def _speech(self, raw: bytes) -> None:
        state = self.server.state
        expected = None if state.api_key is None else f"Bearer {state.api_key}"
        if expected is not None and self.headers.get("Authorization") != expected:
            self._error(401, "invalid api key")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(400, "body is not JSON")
            return
        text = body.get("input") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text:
            self._error(400, "'input' must be a non-empty string")
            return
        with state.lock:
            state.counts[text] += 1
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            state.starts.append((text, time.time()))
            latency = state.latency
            fault = state.faults.popleft() if state.faults else None
        try:
            if latency > 0:
                time.sleep(latency)
            if fault is not None:
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
                self._error(fault.status, fault.message, headers)
                return
            self._send(200, fake_audio(text), content_type="audio/mpeg")
        finally:
            with state.lock:
                state.in_flight -= 1

    def _control(self, action: str, raw: bytes) -> None:
        state = self.server.state
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            self._error(400, "body is not JSON")
            return
        if action == "reset":
            with state.lock:
                state.counts.clear()
                state.faults.clear()
        elif action == "latency":
            with state.lock:
                state.latency = float(body["seconds"])
        elif action == "fail_next":
            retry_after = body.get("retry_after")
            fault = Fault(int(body["status"]), None if retry_after is None else str(retry_after))
            with state.lock:
                state.faults.extend([fault] * int(body.get("n", 1)))
        else:
            self._error(404, f"unknown control {action!r}")
            return
        self._json(200, state.stats())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], state: _State) -> None:
        super().__init__(address, _Handler)
        self.state = state


class FakeProvider:
    """An OpenAI-compatible TTS server on 127.0.0.1 that counts (bills) every call per text.

    ``latency`` (seconds, settable at any time) delays every speech answer; ``fail_next``
    programs the next answers to fail. With ``api_key`` set, other keys get 401.
    """

    def __init__(
        self,
        latency: float = 0.0,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._state = _State(latency, api_key)
        self._address = (host, port)
        # With a server context, it answers HTTPS (a real provider's scheme).
        self._tls = tls
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> FakeProvider:
        """Bind and serve from a daemon thread; returns self."""
        if self._server is not None:
            return self
        self._server = _Server(self._address, self._state)
        if self._tls is not None:
            self._server.socket = self._tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="fake-tts-provider",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port."""
        if self._server is None:
            raise RuntimeError("the fake provider is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL to give the app: ``http://127.0.0.1:PORT/v1`` (``https`` with TLS)."""
        scheme = "http" if self._tls is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}/v1"

    # -- behaviour ----------------------------------------------------------------------------
    @property
    def latency(self) -> float:
        """Seconds every speech answer waits."""
        with self._state.lock:
            return self._state.latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        with self._state.lock:
            self._state.latency = float(seconds)

    def fail_next(
        self,
        n: int,
        status: int,
        retry_after: float | str | None = None,
        message: str = "fake provider fault",
    ) -> None:
        """Answer the next ``n`` speech calls with ``status`` (e.g. 429, 500, 400)."""
        header = None if retry_after is None else str(retry_after)
        with self._state.lock:
            self._state.faults.extend([Fault(status, header, message)] * n)

    # -- counting -----------------------------------------------------------------------------
    def calls(self, text: str) -> int:
        """How many speech calls arrived for ``text``."""
        with self._state.lock:
            return self._state.counts[text]

    def total_calls(self) -> int:
        """How many speech calls arrived in all."""
        with self._state.lock:
            return sum(self._state.counts.values())

    def in_flight(self) -> int:
        """Speech calls being answered right now."""
        with self._state.lock:
            return self._state.in_flight

    def counts(self) -> dict[str, int]:
        """A copy of the per-text call counts."""
        with self._state.lock:
            return dict(self._state.counts)

    def stats(self) -> dict[str, Any]:
        """What ``GET /stats`` answers."""
        return self._state.stats()

    def max_in_flight(self) -> int:
        """The most calls that were ever in flight at once."""
        with self._state.lock:
            return self._state.max_in_flight

    def starts(self) -> list[tuple[str, float]]:
        """(text, time.time()) of every call, in arrival order."""
        with self._state.lock:
            return list(self._state.starts)

    def reset(self) -> None:
        """Forget every count, start time and pending fault (latency stays)."""
        with self._state.lock:
            self._state.counts.clear()
            self._state.faults.clear()
            self._state.starts.clear()
            self._state.max_in_flight = self._state.in_flight


class RemoteFakeProvider:
    """The counting/fault API of :class:`FakeProvider`, for one running as a script."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.port = port
        self._root = f"http://127.0.0.1:{port}"
        self._timeout = timeout

    @property
    def url(self) -> str:
        """The base URL to give the app."""
        return f"{self._root}/v1"

    def stats(self) -> dict[str, Any]:
        """``GET /stats``."""
        response = requests.get(f"{self._root}/stats", timeout=self._timeout)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def _control(self, action: str, body: dict[str, Any] | None = None) -> None:
        response = requests.post(
            f"{self._root}/control/{action}", json=body or {}, timeout=self._timeout
        )
        response.raise_for_status()

    def calls(self, text: str) -> int:
        """How many speech calls arrived for ``text``."""
        return int(self.stats()["calls"].get(text, 0))

    def total_calls(self) -> int:
        """How many speech calls arrived in all."""
        return int(self.stats()["total"])

    def reset(self) -> None:
        """Forget every count and pending fault."""
        self._control("reset")

    def set_latency(self, seconds: float) -> None:
        """Change the latency of every later speech answer."""
        self._control("latency", {"seconds": seconds})

    def fail_next(self, n: int, status: int, retry_after: float | str | None = None) -> None:
        """Answer the next ``n`` speech calls with ``status``."""
        self._control("fail_next", {"n": n, "status": status, "retry_after": retry_after})


def main(argv: list[str] | None = None) -> int:
    """Script mode: serve until SIGTERM/SIGINT, printing the port first."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args(argv)
    fake = FakeProvider(args.latency, port=args.port, api_key=args.api_key).start()

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(fake.port, flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
