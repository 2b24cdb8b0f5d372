"""A local server that speaks the paid providers' documented wire formats, for tests:
ElevenLabs (``/v1/text-to-speech/{id}/with-timestamps``, ``/v1/voices``), Azure
(``/cognitiveservices/v1``, ``/cognitiveservices/voices/list``), Google
(``/v1beta1/text:synthesize``, ``/v1/voices``) and Polly's REST-JSON API (``/v1/speech``,
``/v1/voices``). Loopback only.

Every request is recorded. Audio is a real MP3 lasting 50 ms per character spoken, and
the timing it reports (ElevenLabs' characters, Google's marks, Polly's speech marks)
follows the same clock. ``fail_next`` scripts the next answers' status, body and headers.
"""

from __future__ import annotations

import base64
import html
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit
from xml.etree import ElementTree

from speechbatch.adapters.providers.mp3 import encode_mp3

KEY = "test-key-0123456789"
SECONDS_PER_CHARACTER = 0.05
RATE = 16000
_MARK = re.compile(r'<mark name="([^"]+)"/>')


def mp3_of(text: str) -> bytes:
    """Silence as long as ``text`` takes to say here (50 ms a character), as MP3."""
    return encode_mp3(bytes(int(len(text) * SECONDS_PER_CHARACTER * RATE) * 2), RATE)


@dataclass
class Request:
    """One request as the server read it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


@dataclass
class Failure:
    """An answer to give instead of the real one."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def ssml_text(ssml: bytes) -> str:
    """The text an SSML document speaks (what a listener would hear)."""
    return "".join(ElementTree.fromstring(ssml).itertext())


class PaidProviders(ThreadingHTTPServer):
    """The server (see the module); ``url`` is its base."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[Request] = []
        self.failures: list[Failure] = []
        self.lock = threading.Lock()
        self.in_flight: dict[str, int] = {}
        self.most_in_flight: dict[str, int] = {}
        self.latency = 0.0
        # A latency of one kind of request (the last part of its path, as in
        # ``most_in_flight``: "with-timestamps", "text:synthesize"), instead of ``latency``.
        self.latencies: dict[str, float] = {}
        # Every speech request's (kind, start, end) on time.monotonic().
        self.timeline: list[tuple[str, float, float]] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> PaidProviders:
        """Serve from a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self.shutdown()
        self.server_close()

    def fail_next(self, status: int, body: Any = b"", count: int = 1, **headers: str) -> None:
        """Answer the next ``count`` speech requests with ``status`` and ``body``."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        with self.lock:
            self.failures.extend(Failure(status, raw, dict(headers)) for _ in range(count))

    def speech_requests(self) -> list[Request]:
        """The requests that asked for speech (not voices)."""
        return [r for r in self.requests if r.method == "POST"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: PaidProviders

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def _answer(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, payload: Any, status: int = 200) -> None:
        self._answer(status, json.dumps(payload).encode(), "application/json")

    def _record(self) -> Request:
        parts = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = Request(
            self.command, parts.path, parse_qs(parts.query), dict(self.headers.items()), body
        )
        with self.server.lock:
            self.server.requests.append(request)
        return request

    def _authorized(self, request: Request) -> bool:
        h, q = request.headers, request.query
        signed = "Credential=AKID/" in h.get("Authorization", "")  # Polly: the key id
        given = (
            h.get("xi-api-key") or h.get("Ocp-Apim-Subscription-Key")
            or (q.get("key") or [""])[0] or (signed and KEY)
        )  # fmt: skip
        if given == KEY:
            return True
        self._json({"error": {"message": "invalid key"}, "message": "refused"}, 401)
        return False

    def do_GET(self) -> None:
        request = self._record()
        if not self._authorized(request):
            return
        if request.path == "/v1/voices" and "key" in request.query:  # Google
            self._json({"voices": [{"languageCodes": ["en-US"], "name": "en-US-Neural2-C"}]})
        elif request.path == "/v1/voices" and "Engine" in request.query:  # Polly
            self._json({"Voices": [{"Id": "Joanna", "Name": "Joanna", "LanguageCode": "en-US"}]})
        elif request.path == "/v1/voices":  # ElevenLabs
            self._json({"voices": [{"voice_id": "21m00Tcm4TlvDq8rCL9Xx", "name": "Rachel",
                                    "labels": {"accent": "american"}}]})  # fmt: skip
        elif request.path == "/cognitiveservices/voices/list":
            self._json([{"ShortName": "en-US-AvaNeural", "DisplayName": "Ava",
                         "Locale": "en-US"}])  # fmt: skip
        else:
            self._json({"error": {"message": "not found"}}, 404)

    def do_POST(self) -> None:
        request = self._record()
        if not self._authorized(request):
            return
        with self.server.lock:
            failure = self.server.failures.pop(0) if self.server.failures else None
            kind = request.path.split("/")[-1] or request.path
            self.server.in_flight[kind] = self.server.in_flight.get(kind, 0) + 1
            self.server.most_in_flight[kind] = max(
                self.server.most_in_flight.get(kind, 0), self.server.in_flight[kind]
            )
        started = time.monotonic()
        try:
            latency = self.server.latencies.get(kind, self.server.latency)
            if latency:
                threading.Event().wait(latency)
            if failure is not None:
                self._answer(failure.status, failure.body, "application/json", **failure.headers)
            else:
                self._speak(request)
        finally:
            with self.server.lock:
                self.server.in_flight[kind] -= 1
                self.server.timeline.append((kind, started, time.monotonic()))

    def _speak(self, request: Request) -> None:
        if request.path.endswith("/with-timestamps"):
            text = request.json()["text"]
            self._json({
                "audio_base64": base64.b64encode(mp3_of(text)).decode(),
                "alignment": {
                    "characters": list(text),
                    "character_start_times_seconds": [
                        round(n * SECONDS_PER_CHARACTER, 3) for n in range(len(text))],
                    "character_end_times_seconds": [
                        round((n + 1) * SECONDS_PER_CHARACTER, 3) for n in range(len(text))],
                },
            })  # fmt: skip
        elif request.path == "/cognitiveservices/v1":
            self._answer(200, mp3_of(ssml_text(request.body)), "audio/mpeg")
        elif request.path == "/v1beta1/text:synthesize":
            self._google(request.json())
        elif request.path == "/v1/speech":
            self._polly(request.json())
        else:
            self._json({"error": {"message": "not found"}}, 404)

    def _google(self, body: dict[str, Any]) -> None:
        ssml = body["input"]["ssml"]
        points, spoken = [], 0
        for piece in re.split(r"(<mark name=\"[^\"]+\"/>)", ssml):
            mark = _MARK.fullmatch(piece)
            if mark:
                seconds = round(spoken * SECONDS_PER_CHARACTER, 3)
                points.append({"markName": mark.group(1), "timeSeconds": seconds})
            else:
                spoken += len(html.unescape(re.sub(r"<[^>]+>", "", piece)))
        text = ssml_text(_MARK.sub("", ssml).encode())
        self._json({"audioContent": base64.b64encode(mp3_of(text)).decode(), "timepoints": points})

    def _polly(self, body: dict[str, Any]) -> None:
        text = body["Text"]
        chars = {"x-amzn-RequestCharacters": str(len(text))}
        if body.get("OutputFormat") != "json":
            self._answer(200, mp3_of(text), "audio/mpeg", **chars)
            return
        lines = []
        for sentence in re.finditer(r"[^.!?]+[.!?]*", text):
            if "sentence" in body.get("SpeechMarkTypes", []) and sentence.group().strip():
                start = sentence.start() + len(sentence.group()) - len(sentence.group().lstrip())
                lines.append({"time": int(start * SECONDS_PER_CHARACTER * 1000), "type": "sentence",
                              "start": start, "end": sentence.end(),
                              "value": sentence.group().strip()})  # fmt: skip
            for word in re.finditer(r"\S+", sentence.group()):
                at = sentence.start() + word.start()
                lines.append({"time": int(at * SECONDS_PER_CHARACTER * 1000), "type": "word",
                              "start": at, "end": at + len(word.group()),
                              "value": word.group()})  # fmt: skip
        payload = "\n".join(json.dumps(line) for line in lines).encode()
        self._answer(200, payload, "audio/json", **chars)
