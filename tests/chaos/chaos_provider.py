"""The colleague's fake TTS provider, plus faults programmed per input text.

:class:`tests.support.fake_provider.FakeProvider` answers faults from one global queue,
whichever call comes next, and always with a JSON body. The chaos tests need to say
"the first call for THIS text answers a 200 with an empty body" or "a 400 whose body is
an HTML page" or "THIS text is slow", deterministically, while other items of the same
job run concurrently. :class:`ChaosFakeProvider` adds that, and keeps everything else
(counting every call per text when it arrives, latency, ``fail_next``, ``calls``) as it is.

It reuses the private server/handler/state classes of tests/support/fake_provider.py
(read-only: that module is not changed here).
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer

from tests.support.fake_provider import (
    FakeProvider,
    Fault,
    _Handler,
    _Server,
    _State,
    fake_audio,
)


@dataclass(frozen=True)
class Answer:
    """One programmed answer: any status, any body, any headers.

    ``declared_length`` (when set) is sent as Content-Length instead of ``len(body)``; a
    larger value gives a truncated body (the connection is closed after ``body``).
    """

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    declared_length: int | None = None

    @staticmethod
    def error(status: int, message: str, retry_after: str | None = None) -> Answer:
        """An OpenAI-shaped JSON error, optionally with Retry-After."""
        body = json.dumps({"error": {"message": message, "type": "chaos"}}).encode()
        headers = (("Retry-After", retry_after),) if retry_after is not None else ()
        return Answer(status, body, "application/json", headers)

    @staticmethod
    def empty_200() -> Answer:
        """200 OK with an empty body (a provider that 'succeeded' with no audio)."""
        return Answer(200, b"", "audio/mpeg")

    @staticmethod
    def text(status: int, body: str, content_type: str = "text/html") -> Answer:
        """Any status with a non-JSON body (a proxy's HTML error page, plain text...)."""
        return Answer(status, body.encode(), content_type)

    @staticmethod
    def truncated_200(text: str) -> Answer:
        """200 that promises the whole audio of ``text`` and sends half of it."""
        audio = fake_audio(text)
        return Answer(200, audio[: len(audio) // 2], "audio/mpeg", declared_length=len(audio))


@dataclass
class _Chaos:
    """Per-text programs, shared by the handler threads (guarded by the state's lock)."""

    answers: dict[str, deque[Answer]] = field(default_factory=lambda: defaultdict(deque))
    latency: dict[str, float] = field(default_factory=dict)
    arrivals: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


class _ChaosHandler(_Handler):
    server: _ChaosServer

    def _speech(self, raw: bytes) -> None:
        state = self.server.state
        chaos = self.server.chaos
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
        answer: Answer | None = None
        fault: Fault | None = None
        with state.lock:
            state.counts[text] += 1  # billed when it arrives, whatever the answer
            state.in_flight += 1
            chaos.arrivals[text].append(time.monotonic())
            latency = chaos.latency.get(text, state.latency)
            queued = chaos.answers.get(text)
            if queued:
                answer = queued.popleft()
            elif state.faults:
                fault = state.faults.popleft()
        try:
            if latency > 0:
                time.sleep(latency)
            if answer is not None:
                self._answer(answer)
            elif fault is not None:
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
                self._error(fault.status, fault.message, headers)
            else:
                self._send(200, fake_audio(text), content_type="audio/mpeg")
        finally:
            with state.lock:
                state.in_flight -= 1

    def _answer(self, answer: Answer) -> None:
        length = len(answer.body) if answer.declared_length is None else answer.declared_length
        try:
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(length))
            for name, value in answer.headers:
                self.send_header(name, value)
            if length != len(answer.body):
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(answer.body)
            self.wfile.flush()
        except OSError:
            pass
        if length != len(answer.body):
            self.close_connection = True


class _ChaosServer(_Server):
    def __init__(self, address: tuple[str, int], state: _State, chaos: _Chaos) -> None:
        ThreadingHTTPServer.__init__(self, address, _ChaosHandler)
        self.state = state
        self.chaos = chaos


class ChaosFakeProvider(FakeProvider):
    """FakeProvider + ``program(text, answers...)`` and ``slow(text, seconds)``."""

    def __init__(self, latency: float = 0.0, *, api_key: str | None = None) -> None:
        super().__init__(latency, api_key=api_key)
        self._chaos = _Chaos()

    def start(self) -> ChaosFakeProvider:
        """Bind and serve from a daemon thread; returns self."""
        if self._server is not None:
            return self
        self._server = _ChaosServer(self._address, self._state, self._chaos)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="chaos-fake-tts-provider",
            daemon=True,
        )
        self._thread.start()
        return self

    def program(self, text: str, *answers: Answer) -> None:
        """The next calls for ``text`` get ``answers`` in order, then normal audio."""
        with self._state.lock:
            self._chaos.answers[text].extend(answers)

    def slow(self, text: str, seconds: float | None) -> None:
        """Calls for ``text`` wait ``seconds`` (None: back to the global latency)."""
        with self._state.lock:
            if seconds is None:
                self._chaos.latency.pop(text, None)
            else:
                self._chaos.latency[text] = float(seconds)

    def arrivals(self, text: str) -> list[float]:
        """time.monotonic() of every call for ``text``, in arrival order."""
        with self._state.lock:
            return list(self._chaos.arrivals.get(text, ()))

    def pending_answers(self, text: str) -> int:
        """Programmed answers for ``text`` not used yet."""
        with self._state.lock:
            return len(self._chaos.answers.get(text, ()))

    def calls_for(self, texts: list[str]) -> int:
        """Calls that arrived for any of ``texts``."""
        counts = self.counts()
        return sum(counts.get(t, 0) for t in texts)
