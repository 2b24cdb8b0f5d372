"""The colleague's fake TTS provider, plus faults programmed per input text.

:class:`tests.support.fake_provider.FakeProvider` answers faults from one global queue,
whichever call comes next, and always with a JSON body. The chaos tests need to say
"the first call for THIS text answers a 200 with an empty body" or "a 400 whose body is
an HTML page" or "THIS text is slow", deterministically, while other items of the same
job run concurrently. :class:`ChaosFakeProvider` adds that, and keeps everything else
(counting every call per text when it arrives, latency, ``fail_next``, ``calls``) as it is.

It reuses the private server/handler/state classes of tests/support/fake_provider.py
(read-only: that module is not changed here).

Besides the per-text programs, "weather" for every text at once, for the fault suite:
``storm`` (every call a 429 with Retry-After for a while), ``hang`` (calls held longer
than the client's timeout), ``refuse`` (the listener closed: connections refused, nothing
received) and ``reset_next`` (the request read, then the connection reset unanswered).
Every call that arrives is counted as billed, with its characters, and the calls that a
fault hit are counted per text (``faults_for``), as is the peak of calls in flight.
"""

from __future__ import annotations

import json
import select
import socket
import struct
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
from tests.support.render_audio import Tone, encode_mp3, tone_samples


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
    faulted: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    storm_until: float = 0.0
    storm_retry_after: str = "1"
    hang_until: float = 0.0
    hang_seconds: float = 0.0
    resets_left: int = 0
    real_audio: bool = False
    held: set[str] = field(default_factory=set)  # texts whose calls wait for a release
    _audio: dict[str, bytes] = field(default_factory=dict)

    def audio(self, text: str) -> bytes:
        """The answer for ``text``: the fake's bytes, or (``real_audio``) a short MP3 tone
        that renders can decode, the same bytes for the same text."""
        if not self.real_audio:
            return fake_audio(text)
        if text not in self._audio:
            pitch = 200 + int.from_bytes(fake_audio(text)[-2:], "big") % 400
            self._audio[text] = encode_mp3(tone_samples(Tone(text, 0.25, pitch)))
        return self._audio[text]

    def weather(self, text: str) -> tuple[Answer | None, float | None, bool]:
        """The weather's fault for a call arriving now: (an answer, a hang, a reset);
        the caller holds the state's lock."""
        now = time.monotonic()
        if now < self.storm_until:
            self.faulted[text] += 1
            return Answer.error(429, "storm", retry_after=self.storm_retry_after), None, False
        if now < self.hang_until:
            self.faulted[text] += 1
            return None, self.hang_seconds, False
        if self.resets_left > 0:
            self.resets_left -= 1
            self.faulted[text] += 1
            return None, None, True
        return None, None, False


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
        reset = False
        with state.lock:
            state.counts[text] += 1  # billed when it arrives, whatever the answer
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            chaos.arrivals[text].append(time.monotonic())
            latency = chaos.latency.get(text, state.latency)
            queued = chaos.answers.get(text)
            if queued:
                answer = queued.popleft()
            else:
                answer, hang, reset = chaos.weather(text)
                latency = latency if hang is None else hang
                if answer is None and not reset and hang is None and state.faults:
                    fault = state.faults.popleft()
        gone = False
        try:
            if reset:
                self._reset()
                return
            if latency > 0:
                gone = self._wait_or_gone(latency)
            while not gone and text in chaos.held:
                gone = self._wait_or_gone(0.05)
        finally:
            with state.lock:  # the answer is on its way, or its caller gone: not in flight
                state.in_flight -= 1
        if gone:
            self.close_connection = True
        elif answer is not None:
            self._answer(answer)
        elif fault is not None:
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
            self._error(fault.status, fault.message, headers)
        else:
            self._send(200, self.server.chaos.audio(text), content_type="audio/mpeg")

    def _wait_or_gone(self, seconds: float) -> bool:
        """Wait ``seconds`` before answering; True as soon as the caller hung up (a
        provider stops working on a request whose client is gone)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.connection], [], [], min(left, 0.05))
            if ready:
                try:
                    if not self.connection.recv(1, socket.MSG_PEEK):
                        return True
                except OSError:
                    return True
        return False

    def _reset(self) -> None:
        """Close the connection with an RST, the request read and nothing answered."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

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

    def __init__(
        self, latency: float = 0.0, *, api_key: str | None = None, real_audio: bool = False
    ) -> None:
        super().__init__(latency, api_key=api_key)
        self._chaos = _Chaos(real_audio=real_audio)
        self._reopening: threading.Thread | None = None

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

    def hold(self, text: str) -> None:
        """Calls for ``text`` (arrived or to come) are answered only after ``release``."""
        with self._state.lock:
            self._chaos.held.add(text)

    def release(self, text: str) -> None:
        """Answer the held calls for ``text``, and hold no more."""
        with self._state.lock:
            self._chaos.held.discard(text)

    def arrivals(self, text: str) -> list[float]:
        """time.monotonic() of every call for ``text``, in arrival order."""
        with self._state.lock:
            return list(self._chaos.arrivals.get(text, ()))

    def pending_answers(self, text: str) -> int:
        """Programmed answers for ``text`` not used yet."""
        with self._state.lock:
            return len(self._chaos.answers.get(text, ()))

    # -- weather: faults for every text --------------------------------------------------
    def storm(self, seconds: float, retry_after: float) -> None:
        """Every call for ``seconds`` from now answers 429 with ``Retry-After``."""
        with self._state.lock:
            self._chaos.storm_until = time.monotonic() + seconds
            self._chaos.storm_retry_after = f"{retry_after:g}"

    def hang(self, seconds: float, hold: float) -> None:
        """Every call for ``seconds`` from now waits ``hold`` seconds before its answer."""
        with self._state.lock:
            self._chaos.hang_until = time.monotonic() + seconds
            self._chaos.hang_seconds = hold

    def reset_next(self, n: int) -> None:
        """The next ``n`` calls are read, then their connection is reset unanswered."""
        with self._state.lock:
            self._chaos.resets_left += n

    def refuse(self, seconds: float) -> None:
        """Close the listener for ``seconds`` (connections refused), then listen again on
        the same port (``calm`` waits for that)."""
        self.wait_listening()
        port = self.port
        self.stop()
        self._address = ("127.0.0.1", port)

        def reopen() -> None:
            time.sleep(seconds)
            for _ in range(50):  # the port is ours; a moment of TIME_WAIT aside
                try:
                    self.start()
                    return
                except OSError:
                    time.sleep(0.1)

        self._reopening = threading.Thread(target=reopen, name="chaos-reopen", daemon=True)
        self._reopening.start()

    def wait_listening(self) -> None:
        """Wait until a refusal is over."""
        reopening, self._reopening = self._reopening, None
        if reopening is not None:
            reopening.join(30)

    def calm(self) -> None:
        """End every storm and hang, forget pending resets, listen again."""
        self.wait_listening()
        with self._state.lock:
            self._chaos.storm_until = self._chaos.hang_until = 0.0
            self._chaos.resets_left = 0

    def faults_for(self, text: str) -> int:
        """Calls for ``text`` that a weather fault hit (a 429, a hang, a reset)."""
        with self._state.lock:
            return self._chaos.faulted.get(text, 0)

    def received_characters(self) -> int:
        """Characters of every call received so far (what the provider would bill)."""
        return sum(len(text) * n for text, n in self.counts().items())

    def calls_for(self, texts: list[str]) -> int:
        """Calls that arrived for any of ``texts``."""
        counts = self.counts()
        return sum(counts.get(t, 0) for t in texts)
