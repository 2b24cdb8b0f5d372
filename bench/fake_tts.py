"""A fake OpenAI-compatible speech server for the benchmarks, run as a process of its own.

``python bench/fake_tts.py --latency 0.5`` listens on a free loopback port, prints the port
on its first line and serves until SIGTERM. ``POST /v1/audio/speech`` answers after the
latency with a few bytes that look like MP3 (distinct per text); ``GET /stats`` answers
``{"calls": int, "max_in_flight": int}`` (calls so far, and the most ever in flight at once,
which must never exceed the deployment's ``PROVIDER_CONCURRENCY``); ``POST /reset`` zeroes
both. A process of its own, so that the benchmark's GIL never delays an answer.

``--audio mp3`` answers real audio instead: one MP3 made at start (``--seconds`` of a tone,
24 kHz mono, 48 kbit/s, as a speech API sends), the same for every text, so that the
finish's measurement decodes what it would in production.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# An empty ID3v2.4 tag and one MPEG-1 Layer III frame header: enough for a sniffer.
_MP3_PREFIX = b"ID3\x04\x00\x00\x00\x00\x00\x00\xff\xfb\x90\x64"


class _Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        # (start, end) of each call since the last reset, on the wall clock (time.time()).
        self.calls_timeline: list[tuple[float, float]] = []


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Without it every kept-alive answer stalls about 40 ms (Nagle and delayed ACK).
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet."""

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        counters = self.server.counters
        with counters.lock:
            stats: dict[str, Any] = {
                "calls": counters.calls,
                "max_in_flight": counters.max_in_flight,
            }
            if self.path == "/timeline":
                stats = {"calls": counters.calls_timeline}
                counters.calls_timeline = []
        self._send(json.dumps(stats).encode(), "application/json")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        counters = self.server.counters
        if self.path == "/reset":
            with counters.lock:
                counters.calls = counters.max_in_flight = 0
                counters.calls_timeline = []
            self._send(b"{}", "application/json")
            return
        text = str(json.loads(raw or b"{}").get("input", ""))
        with counters.lock:
            counters.calls += 1
            counters.in_flight += 1
            counters.max_in_flight = max(counters.max_in_flight, counters.in_flight)
        began = time.time()
        try:
            time.sleep(self.server.latency)
        finally:
            with counters.lock:
                counters.in_flight -= 1
                counters.calls_timeline.append((began, time.time()))
        body = self.server.audio or _MP3_PREFIX + hashlib.sha256(text.encode()).digest()
        self._send(body, "audio/mpeg")


def tone_mp3(seconds: float, rate: int = 24000) -> bytes:
    """``seconds`` of a 220 Hz tone as MP3 (mono, 48 kbit/s)."""
    import lameenc
    import numpy as np

    t = np.arange(int(seconds * rate)) / rate
    samples = (0.3 * 32767 * np.sin(2 * np.pi * 220 * t)).astype("<i2")
    encoder = lameenc.Encoder()
    encoder.set_bit_rate(48)
    encoder.set_in_sample_rate(rate)
    encoder.set_channels(1)
    encoder.set_quality(7)
    return bytes(encoder.encode(samples.tobytes()) + encoder.flush())


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, latency: float, audio: bytes = b"") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.latency = latency
        self.audio = audio  # empty: a few distinct bytes per text
        self.counters = _Counters()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per call")
    parser.add_argument("--audio", choices=("fake", "mp3"), default="fake")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of --audio mp3")
    args = parser.parse_args()
    server = _Server(args.latency, tone_mp3(args.seconds) if args.audio == "mp3" else b"")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
