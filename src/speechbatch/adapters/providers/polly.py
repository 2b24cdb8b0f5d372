"""Amazon Polly through boto3 (``SynthesizeSpeech``, MP3), which signs the requests.

Credentials and region come from the standard AWS variables; ``endpoint_url`` points it
at a local endpoint. With ``speech_marks`` a second request (``OutputFormat=json``,
sentence and word marks, billed like the first) times the audio: every call then bills
twice the text's characters, both reserved before the first request leaves. botocore's
own retries are off: the runner retries with the same policy as every provider.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from speechbatch.adapters.providers.base import (
    BillingUnit,
    Delivery,
    PermanentProviderError,
    ProviderError,
    RefusedKeyError,
    RetryableProviderError,
    Span,
    Speech,
    check_send_guard,
)
from speechbatch.adapters.providers.timing import mp3_seconds
from speechbatch.adapters.providers.voices import Voice, VoiceCache

_THROTTLED = {"ThrottlingException", "Throttling", "TooManyRequestsException"}
_REFUSED = {
    "UnrecognizedClientException", "InvalidSignatureException", "AccessDeniedException",
    "ExpiredTokenException", "InvalidClientTokenId", "MissingAuthenticationToken",
}  # fmt: skip


def polly_error(exc: Exception) -> ProviderError:
    """The ProviderError of a botocore failure (see ``base.error_for_status``)."""
    from botocore.exceptions import (
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "")
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 400)
        message = f"provider answered {status}: {code}: {error.get('Message') or ''}".strip()
        if code in _THROTTLED or status == 429 or status >= 500:
            return RetryableProviderError(message, status)
        if code in _REFUSED or status in (401, 403):
            return RefusedKeyError(message, status)
        return PermanentProviderError(message, status)
    if isinstance(exc, ConnectTimeoutError | EndpointConnectionError):
        return RetryableProviderError(
            f"cannot reach provider: {type(exc).__name__}", delivery=Delivery.NOT_SENT
        )
    if isinstance(exc, ReadTimeoutError):
        return RetryableProviderError("provider timed out", delivery=Delivery.IN_DOUBT)
    return RetryableProviderError(
        f"connection lost: {type(exc).__name__}", delivery=Delivery.IN_DOUBT
    )


def _guard(**_: Any) -> None:
    """botocore's ``before-send``: the send guard's last check before a request leaves."""
    check_send_guard()


def parse_marks(lines: bytes) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(sentences, words) as (text, start seconds) from Polly's JSON-lines speech marks."""
    sentences: list[tuple[str, float]] = []
    words: list[tuple[str, float]] = []
    for line in lines.decode("utf-8", "replace").splitlines():
        try:
            mark = json.loads(line)
        except ValueError:
            continue
        if not isinstance(mark, dict) or not isinstance(mark.get("time"), int | float):
            continue
        entry = (str(mark.get("value", "")), float(mark["time"]) / 1000)
        if mark.get("type") == "sentence":
            sentences.append(entry)
        elif mark.get("type") == "word":
            words.append(entry)
    return sentences, words


def spans(marks: list[tuple[str, float]], end: float | None) -> tuple[Span, ...]:
    """Each mark lasts until the next one starts; the last until the end of the audio."""
    last = max([end or 0.0] + [t for _, t in marks])
    ends = [t for _, t in marks[1:]] + [last]
    return tuple(
        {"text": text, "start_seconds": round(start, 3), "end_seconds": round(stop, 3)}
        for (text, start), stop in zip(marks, ends, strict=True)
    )


class PollyProvider:
    """One billed call per ``speak`` (two requests with speech marks; see the module)."""

    name = "polly"
    # Polly's limit of billed characters per request.
    max_chars = 3000
    content_type = "audio/mpeg"
    file_extension = "mp3"
    billing_unit = BillingUnit.CHARACTERS

    def __init__(
        self,
        engine: str,
        timeout_seconds: float,
        *,
        endpoint_url: str | None = None,
        speech_marks: bool = False,
    ) -> None:
        self.model = engine
        self.endpoint_url = endpoint_url
        self.speech_marks = speech_marks
        self.timeout_seconds = timeout_seconds
        self._client: Any = None
        self._lock = threading.Lock()
        self.voice_cache = VoiceCache(self.name, self._list_voices)

    def __repr__(self) -> str:
        return f"PollyProvider(engine={self.model!r}, endpoint_url={self.endpoint_url!r})"

    def client(self) -> Any:
        """The boto3 client, made once (clients are safe to share between threads)."""
        with self._lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                session = boto3.session.Session()
                config = Config(
                    connect_timeout=self.timeout_seconds,
                    read_timeout=self.timeout_seconds,
                    retries={"total_max_attempts": 1, "mode": "standard"},
                )
                self._client = session.client(
                    "polly",
                    region_name=session.region_name or "us-east-1",
                    endpoint_url=self.endpoint_url,
                    config=config,
                )
                self._client.meta.events.register("before-send.polly", _guard)
            return self._client

    @property
    def voices(self) -> tuple[str, ...]:
        """The voice ids of the engine (``Joanna``)."""
        return self.voice_cache.names()

    def billed(self, text: str) -> int:
        """Characters of the text, twice with speech marks (two billed requests)."""
        return len(text) * (2 if self.speech_marks else 1)

    def speak(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> Speech:
        """Synthesize once (and the speech marks when enabled)."""
        known = self.voices
        if known and voice not in known:
            raise PermanentProviderError(f"unknown voice {voice!r} for provider polly")
        request = {"Text": text, "VoiceId": voice, "Engine": self.model, "TextType": "text"}
        audio = self._request(OutputFormat="mp3", **request)
        if not audio:
            raise RetryableProviderError("empty audio", 200)
        if not self.speech_marks:
            return Speech(audio, self.billed(text), self.billing_unit)
        marks = self._request(OutputFormat="json", SpeechMarkTypes=["sentence", "word"], **request)
        sentences, words = parse_marks(marks)
        duration = mp3_seconds(audio)
        return Speech(
            audio, self.billed(text), self.billing_unit,
            spans(sentences, duration) or None, spans(words, duration) or None,
        )  # fmt: skip

    def _request(self, **kwargs: Any) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.client().synthesize_speech(**kwargs)
            return bytes(answer["AudioStream"].read())
        except (ClientError, BotoCoreError) as exc:
            raise polly_error(exc) from exc

    def _list_voices(self) -> list[Voice]:
        from botocore.exceptions import BotoCoreError, ClientError

        found: list[Voice] = []
        token: str | None = None
        try:
            while True:
                extra = {"NextToken": token} if token else {}
                page = self.client().describe_voices(Engine=self.model, **extra)
                for v in page.get("Voices", []):
                    found.append(Voice(v["Id"], str(v.get("Name") or v["Id"]),
                                       str(v.get("LanguageCode") or "")))  # fmt: skip
                token = page.get("NextToken")
                if not token:
                    return found
        except (ClientError, BotoCoreError) as exc:
            raise polly_error(exc) from exc
