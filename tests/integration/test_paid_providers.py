"""ElevenLabs, Azure, Google and Polly against a local server that speaks their
documented wire formats (``tests/support/paid_providers.py``): the request each sends,
its bill, its limit, its timing, and how its errors map."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from speechbatch.adapters.providers.azure import AzureProvider
from speechbatch.adapters.providers.base import (
    BillingUnit,
    Delivery,
    PermanentProviderError,
    RefusedKeyError,
    RetryableProviderError,
    TTSProvider,
)
from speechbatch.adapters.providers.elevenlabs import ElevenLabsProvider
from speechbatch.adapters.providers.google import GoogleProvider
from speechbatch.adapters.providers.polly import PollyProvider
from speechbatch.adapters.providers.timing import mp3_seconds
from tests.support.paid_providers import KEY, PaidProviders, ssml_text

ELEVEN_VOICE = "21m00Tcm4TlvDq8rCL9Xx"
AZURE_VOICE, GOOGLE_VOICE = "en-US-AvaNeural", "en-US-Neural2-C"


@pytest.fixture
def server() -> Iterator[PaidProviders]:
    """The local paid providers."""
    s = PaidProviders().start()
    yield s
    s.stop()


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS credentials the local server accepts (it checks the key id)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def eleven(server: PaidProviders, key: str = KEY) -> ElevenLabsProvider:
    return ElevenLabsProvider(server.url, key, "eleven_multilingual_v2", 5.0)


def azure(server: PaidProviders, key: str = KEY) -> AzureProvider:
    return AzureProvider(server.url, key, 5.0)


def google(server: PaidProviders, key: str = KEY) -> GoogleProvider:
    return GoogleProvider(server.url, key, 5.0)


HTTP: list[tuple[Callable[..., TTSProvider], str]] = [
    (eleven, ELEVEN_VOICE), (azure, AZURE_VOICE), (google, GOOGLE_VOICE),
]  # fmt: skip


def test_elevenlabs_sends_its_request_and_times_words_from_characters(
    server: PaidProviders,
) -> None:
    speech = eleven(server).speak("Hello there. Bye now!", ELEVEN_VOICE, {"speed": 1.1})
    (request,) = server.speech_requests()
    assert request.path == f"/v1/text-to-speech/{ELEVEN_VOICE}/with-timestamps"
    assert request.query == {"output_format": ["mp3_44100_128"]}
    assert request.headers["xi-api-key"] == KEY
    assert request.json() == {
        "text": "Hello there. Bye now!",
        "model_id": "eleven_multilingual_v2",
        "voice_settings": {"speed": 1.1},
    }
    assert speech.billed == 21 and speech.unit is BillingUnit.CHARACTERS
    assert 1.05 <= (mp3_seconds(speech.audio) or 0) <= 1.2  # the base64 audio, decoded
    assert speech.sentences == (
        {"text": "Hello there.", "start_seconds": 0.0, "end_seconds": 0.6},
        {"text": "Bye now!", "start_seconds": 0.65, "end_seconds": 1.05},
    )
    assert speech.words is not None
    assert [w["text"] for w in speech.words] == ["Hello", "there.", "Bye", "now!"]
    assert speech.words[1] == {"text": "there.", "start_seconds": 0.3, "end_seconds": 0.6}


def test_azure_escapes_the_text_into_its_ssml(server: PaidProviders) -> None:
    speech = azure(server).speak("Tom & Jerry <3", AZURE_VOICE, {"speed": 1.25})
    (request,) = server.speech_requests()
    assert request.path == "/cognitiveservices/v1"
    assert request.headers["Ocp-Apim-Subscription-Key"] == KEY
    assert request.headers["Content-Type"] == "application/ssml+xml"
    assert request.headers["X-Microsoft-OutputFormat"] == "audio-24khz-96kbitrate-mono-mp3"
    assert ssml_text(request.body) == "Tom & Jerry <3"  # arrives intact
    assert b'<voice name="en-US-AvaNeural"><prosody rate="1.25">' in request.body
    assert speech.billed == len("Tom & Jerry <3")  # the text, not the markup
    assert speech.sentences is None


def test_google_marks_each_sentence_and_word_and_bills_bytes(server: PaidProviders) -> None:
    text = "Café & crème. <Done>"
    speech = google(server).speak(text, GOOGLE_VOICE, {"speed": 0.9})
    (request,) = server.speech_requests()
    assert request.path == "/v1beta1/text:synthesize" and request.query == {"key": [KEY]}
    body = request.json()
    assert body["voice"] == {"languageCode": "en-US", "name": GOOGLE_VOICE}
    assert body["audioConfig"] == {"audioEncoding": "MP3", "speakingRate": 0.9}
    assert body["enableTimePointing"] == ["SSML_MARK"]
    ssml = body["input"]["ssml"]
    assert ssml.startswith('<speak><mark name="s0"/><mark name="w0_0"/>Café ')
    assert ssml_text(ssml.encode()) == text
    assert speech.unit is BillingUnit.BYTES and speech.billed == len(text.encode())
    assert speech.sentences is not None and speech.words is not None
    assert [s["text"] for s in speech.sentences] == ["Café & crème.", "<Done>"]
    assert speech.sentences[1]["start_seconds"] == pytest.approx(14 * 0.05)
    assert [w["text"] for w in speech.words] == ["Café", "&", "crème.", "<Done>"]
    assert speech.words[2]["end_seconds"] == speech.sentences[1]["start_seconds"]


def test_google_counts_its_limit_in_bytes(server: PaidProviders) -> None:
    provider = google(server)
    # 2,400 characters but 4,800 bytes: word marks would pass 5,000 bytes, sentence
    # marks alone fit.
    fits = " ".join(["éé"] * 800) + "."
    speech = provider.speak(fits, GOOGLE_VOICE)
    ssml = server.speech_requests()[-1].json()["input"]["ssml"]
    assert '<mark name="s0"/>' in ssml and "w0_0" not in ssml
    assert speech.words is None and speech.sentences is not None
    # 2,600 characters, 5,200 bytes: refused before anything is sent.
    with pytest.raises(PermanentProviderError) as info:
        provider.speak("é" * 2600, GOOGLE_VOICE)
    assert info.value.delivery is Delivery.NOT_SENT
    assert len(server.speech_requests()) == 1


@pytest.mark.parametrize(("make", "voice"), HTTP)
def test_429_is_retryable_with_its_retry_after(
    server: PaidProviders, make: Callable[..., TTSProvider], voice: str
) -> None:
    server.fail_next(429, {"error": {"message": "slow down"}}, Retry_After="2")
    with pytest.raises(RetryableProviderError) as info:
        make(server).speak("hi", voice)
    assert info.value.status == 429 and info.value.retry_after == 2.0
    server.fail_next(503, b"busy")
    with pytest.raises(RetryableProviderError):
        make(server).speak("hi", voice)


@pytest.mark.parametrize(("make", "voice"), HTTP)
def test_a_refused_key_is_its_own_error_and_never_shows_the_key(
    server: PaidProviders, make: Callable[..., TTSProvider], voice: str
) -> None:
    provider = make(server, "wrong-key-SECRET")
    with pytest.raises(RefusedKeyError) as info:
        provider.speak("hi", voice)
    assert info.value.status == 401 and "SECRET" not in info.value.message
    assert provider.voices == ()  # the voices call was refused too: no list


def test_other_4xx_fail_with_the_providers_message(server: PaidProviders) -> None:
    server.fail_next(422, {"detail": [{"msg": "text is empty", "loc": ["body", "text"]}]})
    with pytest.raises(PermanentProviderError) as info:
        eleven(server).speak("hi", ELEVEN_VOICE)
    assert info.value.message == "provider answered 422: text is empty"
    server.fail_next(400, {"error": {"code": 400, "message": "Invalid SSML", "status": "X"}})
    with pytest.raises(PermanentProviderError) as info:
        google(server).speak("hi", GOOGLE_VOICE)
    assert info.value.message == "provider answered 400: Invalid SSML"
    assert type(info.value) is PermanentProviderError


def test_voices_come_from_each_providers_voices_call_once(server: PaidProviders) -> None:
    providers = [eleven(server), azure(server), google(server)]
    assert [p.voices for p in providers] == [(ELEVEN_VOICE,), (AZURE_VOICE,), (GOOGLE_VOICE,)]
    assert [p.voices for p in providers] == [(ELEVEN_VOICE,), (AZURE_VOICE,), (GOOGLE_VOICE,)]
    gets = [r.path for r in server.requests if r.method == "GET"]
    assert gets == ["/v1/voices", "/cognitiveservices/voices/list", "/v1/voices"]


@pytest.mark.usefixtures("aws")
def test_polly_speaks_and_times_with_speech_marks_billed_twice(server: PaidProviders) -> None:
    provider = PollyProvider("neural", 5.0, endpoint_url=server.url, speech_marks=True)
    assert provider.voices == ("Joanna",)
    assert provider.billed("Hi there. Go.") == 26
    speech = provider.speak("Hi there. Go.", "Joanna")
    audio, marks = server.speech_requests()
    assert audio.path == marks.path == "/v1/speech"
    assert audio.json() == {"Engine": "neural", "OutputFormat": "mp3", "Text": "Hi there. Go.",
                            "TextType": "text", "VoiceId": "Joanna"}  # fmt: skip
    assert marks.json()["OutputFormat"] == "json"
    assert marks.json()["SpeechMarkTypes"] == ["sentence", "word"]
    assert "AWS4-HMAC-SHA256" in audio.headers["Authorization"]
    assert speech.billed == 26
    assert speech.sentences is not None and speech.words is not None
    assert [(s["text"], s["start_seconds"]) for s in speech.sentences] == [
        ("Hi there.", 0.0), ("Go.", 0.5),
    ]  # fmt: skip
    assert [w["text"] for w in speech.words] == ["Hi", "there.", "Go."]
    # The last word ends with the audio, which MP3's frames pad by up to about 0.1 s.
    assert 0.65 <= speech.words[-1]["end_seconds"] <= 0.8


@pytest.mark.usefixtures("aws")
def test_polly_maps_throttling_and_a_refused_key(
    server: PaidProviders, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = PollyProvider("neural", 5.0, endpoint_url=server.url)
    provider.voice_cache.voices()  # listed before the failures are scripted
    server.fail_next(400, {"message": "Rate exceeded"}, x_amzn_ErrorType="ThrottlingException:")
    with pytest.raises(RetryableProviderError):
        provider.speak("hi", "Joanna")
    server.fail_next(400, {"message": "bad text"}, x_amzn_ErrorType="InvalidSsmlException:")
    with pytest.raises(PermanentProviderError) as info:
        provider.speak("hi", "Joanna")
    assert "bad text" in info.value.message and type(info.value) is PermanentProviderError
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "WRONG")
    refused = PollyProvider("neural", 5.0, endpoint_url=server.url)
    with pytest.raises(RefusedKeyError):
        refused.speak("hi", "Joanna")
    assert len(server.speech_requests()) == 3
