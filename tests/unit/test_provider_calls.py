"""The paid providers' requests and error mapping with ``responses`` (no server), and
the timing helpers."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest
import responses
from botocore.exceptions import ClientError, EndpointConnectionError

from speechbatch.adapters.providers.azure import AzureProvider
from speechbatch.adapters.providers.base import (
    Delivery,
    PermanentProviderError,
    RefusedKeyError,
    RetryableProviderError,
)
from speechbatch.adapters.providers.elevenlabs import ElevenLabsProvider
from speechbatch.adapters.providers.google import GoogleProvider
from speechbatch.adapters.providers.polly import polly_error
from speechbatch.adapters.providers.timing import from_characters, from_marks, sentences_of

BASE = "https://tts.example.test"


@pytest.fixture
def mocked() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock() as m:
        yield m


def test_elevenlabs_posts_text_and_model_and_honours_retry_after(
    mocked: responses.RequestsMock,
) -> None:
    mocked.get(f"{BASE}/v1/voices", json={"voices": [{"voice_id": "v1", "name": "V"}]})
    url = f"{BASE}/v1/text-to-speech/v1/with-timestamps"
    mocked.post(url, status=429, headers={"Retry-After": "3"}, json={"detail": "busy"})
    audio = base64.b64encode(b"\xff\xfbMP3").decode()
    mocked.post(url, json={"audio_base64": audio})
    provider = ElevenLabsProvider(BASE, "k", "eleven_multilingual_v2", 5.0)
    with pytest.raises(RetryableProviderError) as info:
        provider.speak("Hi.", "v1")
    assert info.value.retry_after == 3.0 and info.value.message == "provider answered 429: busy"
    speech = provider.speak("Hi.", "v1")
    assert speech.audio == b"\xff\xfbMP3" and speech.billed == 3 and speech.words is None
    sent = mocked.calls[-1].request
    assert json.loads(sent.body or b"{}") == {"text": "Hi.", "model_id": "eleven_multilingual_v2"}
    assert sent.headers["xi-api-key"] == "k"
    assert sent.url == f"{url}?output_format=mp3_44100_128"


def test_azure_403_is_a_refused_key(mocked: responses.RequestsMock) -> None:
    mocked.get(f"{BASE}/cognitiveservices/voices/list", json=[])
    mocked.post(f"{BASE}/cognitiveservices/v1", status=403, body=b"")
    with pytest.raises(RefusedKeyError) as info:
        AzureProvider(BASE, "k", 5.0).speak("hi", "en-US-AvaNeural")
    assert info.value.status == 403


def test_google_refuses_over_5000_bytes_without_a_request(mocked: responses.RequestsMock) -> None:
    mocked.get(f"{BASE}/v1/voices", json={"voices": []})
    provider = GoogleProvider(BASE, "k", 5.0)
    assert provider.billed("é" * 10) == 20
    with pytest.raises(PermanentProviderError) as info:
        provider.speak("€" * 1700, "en-US-Neural2-C")  # 1,700 characters, 5,100 bytes
    assert info.value.delivery is Delivery.NOT_SENT
    assert [c.request.method for c in mocked.calls] == ["GET"]


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "SynthesizeSpeech",
    )


def test_polly_errors_map_like_every_providers() -> None:
    throttled = polly_error(_client_error("ThrottlingException", 400))
    assert isinstance(throttled, RetryableProviderError)
    assert isinstance(polly_error(_client_error("ServiceFailure", 500)), RetryableProviderError)
    refused = polly_error(_client_error("UnrecognizedClientException", 403))
    assert isinstance(refused, RefusedKeyError)
    bad = polly_error(_client_error("TextLengthExceededException", 400))
    assert type(bad) is PermanentProviderError and bad.status == 400
    unsent = polly_error(EndpointConnectionError(endpoint_url="http://x"))
    assert unsent.delivery is Delivery.NOT_SENT


def test_sentences_and_words_of_a_text() -> None:
    sentences = sentences_of("One two. Three!  Four")
    assert [s.token.text for s in sentences] == ["One two.", "Three!", "Four"]
    assert [w.text for w in sentences[0].words] == ["One", "two."]


def test_character_timing_becomes_words_and_sentences() -> None:
    text = "Hi. Yo"
    starts = [0.1 * n for n in range(len(text))]
    ends = [0.1 * n + 0.1 for n in range(len(text))]
    sentences, words = from_characters(list(text), starts, ends)
    assert [(s["text"], s["start_seconds"], s["end_seconds"]) for s in sentences] == [
        ("Hi.", 0.0, 0.3), ("Yo", 0.4, 0.6),
    ]  # fmt: skip
    assert [w["text"] for w in words] == ["Hi.", "Yo"]


def test_marks_end_where_the_next_begins_and_the_last_with_the_audio() -> None:
    sentences = sentences_of("A b. C")
    spans, words = from_marks(sentences, {0: 0.0, 1: 1.0}, {(0, 0): 0.0, (0, 1): 0.5}, 2.0)
    assert [(s["start_seconds"], s["end_seconds"]) for s in spans] == [(0.0, 1.0), (1.0, 2.0)]
    assert words is not None
    assert [(w["text"], w["start_seconds"], w["end_seconds"]) for w in words] == [
        ("A", 0.0, 0.5), ("b.", 0.5, 1.0), ("C", 1.0, 2.0),
    ]  # fmt: skip
